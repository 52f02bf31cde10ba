"""The oracles: each a small module with a function that returns findings, never raises on a bug.

Names as they appear in reports are the values of :class:`Oracle`: ``reference``, ``isolation``,
``cross-rank``, ``liveness``, ``hygiene``, ``buffer-integrity``, ``retention`` (and ``error``
for a stack that raised).
"""

from harness.oracles.findings import COMMUNICATION, PRECEDENCE, Failure, Oracle

ORACLES = tuple(o.value for o in Oracle if o is not Oracle.ERROR)

__all__ = ["COMMUNICATION", "Failure", "ORACLES", "Oracle", "PRECEDENCE"]
