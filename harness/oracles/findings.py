"""A failure as plain data: which oracle, on which rank, at which step, what exactly.

A failure has two halves. Its identity is fields, set by the oracle that found it: ``kind``
(what went wrong, in words that stay the same from case to case), and where that applies the
``registry`` that holds a dead id, the ``site`` (``file.py function``, line numbers left out)
where it happened, the ``collective`` issued there, the ``holder`` that keeps a dead object
alive, and ``passed_on`` (an isolation finding that only passes on the run alone's own failure:
that failure's oracle, its identity copied). Two failures with the same identity are one failure
(:mod:`harness.stress.signature`). Its ``detail`` is for people: it may be reworded at will.
"""

from __future__ import annotations

import dataclasses
import enum


class Oracle(str, enum.Enum):
    """The oracles by the names reports use, in order of precedence: a case's primary oracle is the
    first that failed. A misaligned collective explains everything after it, so the ledger's
    verdicts come first; ``error`` (the stack raised) comes last."""

    CROSS_RANK = "cross-rank"
    LIVENESS = "liveness"
    BUFFER_INTEGRITY = "buffer-integrity"
    REFERENCE = "reference"
    ISOLATION = "isolation"
    HYGIENE = "hygiene"
    RETENTION = "retention"
    EXERCISED = "exercised"      # under --strict: a case that needs id reuse and got none
    ERROR = "error"

    # Members are their names in every text (f-strings, str(), JSON), as they were as plain strings.
    __str__ = str.__str__
    __format__ = str.__format__


PRECEDENCE = tuple(o.value for o in Oracle)

# Failures after which the group's communication is in doubt: the runner recycles the group.
COMMUNICATION = frozenset({Oracle.CROSS_RANK, Oracle.LIVENESS, Oracle.ERROR})


# Kinds that code branches on (every other kind is only compared).
BROKE_GROUP = "the isolated run broke its group"      # the runner restarts the group after it
HOLDS_DEAD_ID = "holds a dead id"
SURVIVOR = "survivor"
REFERENCE_DIFFERS = "differs from the reference"
ISOLATED_RUN_FAILED = "the isolated run gave no result"


@dataclasses.dataclass
class Failure:
    oracle: str
    detail: str
    rank: int | None = None
    step: int | None = None
    model: int | None = None
    left_by: str | None = None      # the case before, where this case inherited what failed from it
    # identity (see the module docstring)
    kind: str = ""
    registry: str | None = None
    site: str | None = None
    collective: str | None = None
    holder: str | None = None
    passed_on: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Failure":
        return cls(**d)

    def line(self) -> str:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.model is not None:
            where.append(f"model {self.model}")
        if self.step is not None:
            where.append(f"step {self.step}")
        return f"[{self.oracle}] {', '.join(where)}{': ' if where else ''}{self.detail}"
