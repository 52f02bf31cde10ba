"""Fault injection: a rank raises, exits, is killed, hangs or spins at a chosen point of a case.

A case with ``fault="KIND@RANKS"`` (e.g. ``"raise@1"``) triggers the fault on those ranks at the
start of model 0's step 1 (or step 0 for one-step cases). The runner calls :func:`fault_hook`
with any launcher, so the same fault cases run under spawn, torchrun and mpirun. The kinds are
in :mod:`harness.faults.inject`, the built-in catalogue (``python -m harness run --faults``) in
:mod:`harness.faults.cases`, and the repeated measurement in :mod:`harness.faultmatrix`.
"""

from __future__ import annotations


def fault_hook(case, rank: int, model: int, step: int) -> None:
    if case.fault in ("none", "") or model != 0 or step != min(1, case.steps - 1):
        return
    from harness.faults.inject import trigger
    trigger(case.fault, rank)
