"""``python -m harness stress``: randomised cases from a seed, run in batches, failures shrunk.

The pieces, one job per file:

* :mod:`harness.stress.strategies`: Hypothesis strategies for case specs (recipes, shapes,
  steps, models, special values, construction, id-reuse mode).
* :mod:`harness.stress.explore`: drives Hypothesis programmatically: draws a batch of cases
  from a seed, and later replays the same draw to let Hypothesis shrink one failing case.
* :mod:`harness.stress.candidates`: runs candidate case sequences for the shrinker, on one
  persistent rank group (or in this process for ``--launcher inproc``), fresh state each time.
* :mod:`harness.stress.shrink`: per failure signature: which preceding cases matter, the
  Hypothesis shrink, the repro file, and its check in a fresh process.
* :mod:`harness.stress.repro`: repro files, the ``python -m harness run`` command that runs
  one, and running that command once to see that it reproduces.
* :mod:`harness.stress.record`: the run's record (every case, failures, totals) and its
  writers (``stress.json``, ``junit.xml``, ``index.html``).
* :mod:`harness.stress.session`: the main loop: batches until the time budget is spent.
* :mod:`harness.stress.streams`: which of the seed's batches a shard and group run (``--shard``,
  ``--groups``).
* :mod:`harness.stress.signature`: a failure's signature (oracle, call site or registry; ids,
  addresses and sizes blanked): what makes two failing cases one failure.
* :mod:`harness.stress.claims`: which group of a ``--groups`` run shrinks a failure (the first).
* :mod:`harness.stress.groups`: ``--groups N``: the groups as child stress processes, their
  GPUs, the progress line over all of them, and their merge.
* :mod:`harness.stress.merge`: ``stress merge OUT DIR...``: one report from many folders.
* :mod:`harness.stress.summary`: the summary printed at the end.
* :mod:`harness.stress.progress`: the progress line on stderr.
* :mod:`harness.stress.cli`: the command line.
"""
