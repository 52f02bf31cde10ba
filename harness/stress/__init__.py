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
* :mod:`harness.stress.progress`: the progress line on stderr.
* :mod:`harness.stress.cli`: the command line.
"""
