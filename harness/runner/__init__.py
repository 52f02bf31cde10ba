"""Runners: one case executor (:mod:`case_exec`) driven in process, or by a controller over rank groups.

* :mod:`harness.runner.case_exec` -- run one case in this process (any rank), with its oracles.
* :mod:`harness.runner.ledger` -- the collective ledger (every collective, with its call site).
* :mod:`harness.runner.inproc` -- many cases in this process (world size 1), plus isolation.
* :mod:`harness.runner.controller` -- persistent rank groups driven from a controller.
* :mod:`harness.runner.worker` -- the worker loop every launcher starts (imports no controller code).
* :mod:`harness.runner.launchers` -- spawn, torchrun, mpirun.
"""
