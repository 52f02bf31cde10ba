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
* :mod:`harness.stress.record`: the run's record as it grows (every case, failures, totals, as
  the typed records of :mod:`harness.report.stress_model`) and its writers (``stress.json``
  through its one writer :mod:`harness.report.stress_file`, ``junit.xml``, ``index.html``).
* :mod:`harness.stress.session`: the main loop: batches until the time budget is spent, and
  each new failure's shrink and check.
* :mod:`harness.stress.batch`: one batch as an object: drawn, run case by case, ended.
* :mod:`harness.stress.streams`: which of the seed's batches a shard and group run (``--shard``,
  ``--groups``).
* :mod:`harness.stress.signature`: a failure's signature, made of the identity fields its
  oracle set (oracle, kind, call site or registry): what makes two failing cases one failure.
* :mod:`harness.stress.claims`: which group of a ``--groups`` run shrinks a failure (the first).
* :mod:`harness.stress.groups`: ``--groups N``: the groups as child stress processes, their
  GPUs, the progress line over all of them, and their merge.
* :mod:`harness.stress.merge`: ``stress merge OUT DIR...``: one report from many folders.
* :mod:`harness.stress.summary`: the summary printed at the end.
* :mod:`harness.stress.progress`: the progress line on stderr.
* :mod:`harness.stress.cli`: the command line.
"""
