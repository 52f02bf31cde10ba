"""A kind of failure in a stress report: its status, its repro and how the repro was checked.

:class:`FailureRecord` is one kind of failure (one signature): the cases that had it, its
:class:`Status`, its tries and its :class:`Repro` (the file, the command, what the shrink did
(:class:`ShrinkInfo`) and the :class:`Check` of the command in fresh processes, every form
tried an :class:`Attempt`). Part of :class:`harness.report.stress_model.StressReport`.
"""

from __future__ import annotations

import dataclasses
import enum

from harness.case.spec import CaseSpec
from harness.report.records import Record, many


class Status(str, enum.Enum):
    """Where a kind of failure stands; its value is what the report shows."""

    FOUND = "found"
    UNCHECKED = "found; repro not checked yet"
    SHRINKING = "shrinking"
    INTERRUPTED = "interrupted while shrinking; repro not checked"
    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    SHRUNK_ELSEWHERE = "shrunk by another group"

    __str__ = str.__str__
    __format__ = str.__format__


# --- a repro and its check -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Check(Record):
    """A repro command run in fresh processes: reproduced only if every run failed the same way."""

    reproduced: bool
    exit_code: int | None = None
    oracle: str | None = None
    timed_out: bool = False
    seconds: float = 0.0
    output_tail: str = ""
    runs: int = 1
    reproduced_runs: int = 0


@dataclasses.dataclass(frozen=True)
class Attempt(Record):
    """One repro checked: the minimal, the unshrunk, or the batch replay."""

    kind: str
    cases: int
    describe: str
    reproduced: bool
    exit_code: int | None = None
    oracle: str | None = None
    seconds: float = 0.0
    runs: int = 1
    reproduced_runs: int = 0
    reuse_pinned: str | None = None


@dataclasses.dataclass(frozen=True)
class ShrinkInfo(Record):
    """What the shrink did for a repro."""

    shrunk: bool = False
    reproducible: bool | None = None
    candidates_run: int = 0
    candidates_seen: int = 0
    candidates_declined: int = 0
    sequences_run: int = 0
    out_of_time: bool = False
    shrink_s: float = 0.0
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class Repro(Record):
    """A repro file, the command that runs it, and whether that command reproduced the failure
    (``verified``: None while not checked)."""

    file: str
    command: str
    kind: str
    cases: int
    verified: bool | None = None
    preceding_cases: int = 0
    target: str | None = None
    spec: CaseSpec | None = None
    describe: str = ""
    steps: int | None = None
    models: int | None = None
    layers: int | None = None
    recipe: str | None = None
    reuse_pinned: str | None = None
    verification: Check | None = None
    attempts: tuple = ()
    shrink: ShrinkInfo = ShrinkInfo()
    note_merge: str | None = None

    _convert = {"spec": CaseSpec.from_dict, "verification": Check.from_dict,
                "attempts": lambda v: tuple(Attempt.from_dict(a) for a in v), "shrink": ShrinkInfo.from_dict}

    def rank(self) -> tuple:
        """Smaller is better: verified first, then fewest cases, then the simplest case."""
        return (0 if self.verified else 1, self.cases, self.steps or 0, self.models or 0, self.layers or 0)


NO_REPRO_RANK = (2, 0, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class Replay(Record):
    """The exact replay of the batch a failure was found in."""

    file: str | None
    command: str | None
    case: str


@dataclasses.dataclass(frozen=True)
class Original(Record):
    """The failing case as found, before shrinking."""

    spec: CaseSpec
    describe: str
    preceding_cases: int
    steps: int | None = None
    models: int | None = None
    layers: int | None = None
    recipe: str | None = None

    _convert = {"spec": CaseSpec.from_dict}


@dataclasses.dataclass(frozen=True)
class OtherTry(Record):
    """A case tried for a failure whose repro did not reproduce, kept aside."""

    target: str | None
    kind: str | None
    cases: int | None
    note: str | None = None
    attempts: tuple = ()

    _convert = {"attempts": lambda v: tuple(Attempt.from_dict(a) for a in v)}

    @classmethod
    def of(cls, repro: Repro) -> "OtherTry":
        return cls(repro.target, repro.kind, repro.cases, repro.shrink.note, repro.attempts)


@dataclasses.dataclass(frozen=True)
class PartFailure(Record):
    """In a merged report: one part's failure of this kind."""

    part: str
    folder: str
    n: int
    count: int
    status: Status | None

    _convert = {"status": Status}


@dataclasses.dataclass
class FailureRecord(Record):
    """One kind of failure (one signature): its cases, its status and its repro. Mutable: the
    session counts cases against it and replaces its repro as the shrink goes on."""

    n: int
    oracle: str
    signature: str
    first_case: str
    found_s: float
    detail: str
    original: Original
    cases: list = dataclasses.field(default_factory=list)
    count: int = 1
    status: Status = Status.FOUND
    tries: int = 0
    repro: Repro | None = None
    replay: Replay | None = None
    other_tries: list = dataclasses.field(default_factory=list)
    shrunk_by_group: int | None = None
    # a merged report: the parts it appeared in, and which part's repro it keeps
    parts: list = dataclasses.field(default_factory=list)
    found_in: str | None = None
    repro_from: str | None = None
    repro_source: str | None = None

    _convert = {"original": Original.from_dict, "status": Status, "repro": Repro.from_dict,
                "replay": Replay.from_dict, "other_tries": many(OtherTry.from_dict),
                "parts": many(PartFailure.from_dict)}

    def repro_rank(self) -> tuple:
        return self.repro.rank() if self.repro is not None else NO_REPRO_RANK
