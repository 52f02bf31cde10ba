"""The rank side of the runner: what runs inside each rank's process.

* :mod:`~harness.runner.rank.worker` -- the entry point every launcher starts; sets up stack dumps.
* :mod:`~harness.runner.rank.serve` -- a controlled rank: settings, stack, zygote, message loop.
* :mod:`~harness.runner.rank.settings` -- the run's settings as a rank receives them, once.
* :mod:`~harness.runner.rank.state` -- everything a rank keeps between cases, with one reset.
* :mod:`~harness.runner.rank.execute` -- one case on this rank: build, steps, death, retention.
* :mod:`~harness.runner.rank.result` -- what a rank reports for a case.
* :mod:`~harness.runner.rank.zygote` -- fresh children for the isolated re-run of a case.
* :mod:`~harness.runner.rank.watchdog` -- stall reports, and no rank outliving its controller.

Nothing here imports the controller's side (:mod:`harness.runner.group` and above).
"""

__harness_hidden__ = True
