"""What a rank that hangs or dies can still tell: beside its Python stacks, the rest of a hang report.

* :mod:`~harness.hangs.flight_recorder` -- PyTorch's flight recorder (the last collectives of each
  rank, gloo and NCCL, with their states): switched on in the ranks' environment, dumped, formatted;
* :mod:`~harness.hangs.native_stacks` -- native stacks, where an installed tool can take them;
* :mod:`~harness.hangs.report` -- the exchange: the controller asks, each rank's watchdog answers
  with its recorder, the stack's progress record and its native stacks, and the controller
  collects them into the liveness report (:func:`harness.runner.diagnostics.hang_failures`).
"""
