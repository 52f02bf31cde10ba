"""The runner: cases through one pipeline, in this process or on persistent rank groups.

Controller side (this process):

* :mod:`~harness.runner.config` -- the frozen run configuration; every default of a run.
* :mod:`~harness.runner.options` -- the run options, declared once for the CLI, pytest and stress.
* :mod:`~harness.runner.cases` -- which cases a run runs.
* :mod:`~harness.runner.machine` -- whether this machine can run it (memory, cores, launchers).
* :mod:`~harness.runner.session` -- sessions, and a whole run (:func:`~harness.runner.session.run`).
* :mod:`~harness.runner.pipeline` -- run, isolated re-run, judge, verdict: once, for every backend.
* :mod:`~harness.runner.judge` -- the verdict from every rank's results, the repro, the recycle plan.
* :mod:`~harness.runner.inproc`, :mod:`~harness.runner.controlled`, :mod:`~harness.runner.spmd` -- backends.
* :mod:`~harness.runner.group` -- a rank group's processes and messages;
  :mod:`~harness.runner.diagnostics` -- stacks, exit status and ledgers of dead or hung ranks.
* :mod:`~harness.runner.launchers` -- spawn, torchrun, mpirun; :mod:`~harness.runner.cleanup`.
* :mod:`~harness.runner.messages`, :mod:`~harness.runner.events`, :mod:`~harness.runner.interrupts`,
  :mod:`~harness.runner.placement`, :mod:`~harness.runner.spmd_env`.

Rank side: :mod:`harness.runner.rank` (it imports nothing of the controller side).
"""

__harness_hidden__ = True
