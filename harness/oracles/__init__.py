"""The oracles: each a small module with a function that returns findings, never raises on a bug.

Names as they appear in reports: ``reference``, ``isolation``, ``cross-rank``, ``liveness``,
``hygiene``, ``buffer-integrity``, ``retention``.
"""

from harness.oracles.findings import Failure

ORACLES = ("reference", "isolation", "cross-rank", "liveness", "hygiene", "buffer-integrity", "retention")

__all__ = ["Failure", "ORACLES"]
