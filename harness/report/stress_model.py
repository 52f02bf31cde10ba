"""A stress run's record as typed data: what ``stress.json`` holds, field by field.

One case that ran (:class:`CaseEntry`), one kind of failure
(:class:`~harness.report.stress_failure.FailureRecord`: its status, its tries, its repro), one batch (:class:`Batch`), the totals
(:class:`Totals`) and the whole report (:class:`StressReport`). A merged report is a
:class:`StressReport` like any other, with the parts it was made of (:class:`PartInfo`) and the
parts that were expected and not given (``missing_parts``): it is complete when every part it
holds finished and none is missing.

Every class converts to plain data (``to_dict``) and back (``from_dict``) under the keys the file
has always used; :mod:`harness.report.stress_file` is the one writer and the one reader of the
file. The stress run (:mod:`harness.stress`), its merge, and the HTML and trend reports read and
write these objects only.
"""

from __future__ import annotations

import collections
import dataclasses

from harness.case.spec import CaseSpec
from harness.oracles.findings import PRECEDENCE
from harness.report.records import Record, plain
from harness.report.stress_failure import FailureRecord

# 2: a failure's signature is made from the identity fields its oracle sets
# (harness.stress.signature); format 1 made it from the message text.
FORMAT = "harness-stress/2"
OLD_FORMATS = ("harness-stress/1",)


# --- cases and batches ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CaseEntry(Record):
    """One case that ran: its verdict, which failure it counts against, its spec and timings."""

    name: str
    batch: int
    index: int
    outcome: str
    oracle: str | None
    spec: CaseSpec
    describe: str
    oracles: tuple = ()
    ranks: tuple = ()
    failure: int | None = None
    signature: str | None = None
    reuse_events: int = 0
    models_built: int = 0
    steps_compared: int = 0
    duration_s: float = 0.0
    wall_s: float = 0.0
    started_s: float = 0.0
    finished_s: float = 0.0
    retention_warnings: int = 0
    skip_reason: str = ""
    detail: str = ""
    part: str | None = None

    _convert = {"spec": CaseSpec.from_dict, "oracles": tuple, "ranks": tuple}


@dataclasses.dataclass
class Batch(Record):
    """One batch: drawn from its seed, run on one rank group until it ended (``ended``: why)."""

    index: int
    seed: int
    size: int
    started_s: float
    cases_run: int = 0
    ended: str | None = None
    duration_s: float | None = None
    startup_s: float | None = None
    file: str | None = None
    replay: str | None = None
    part: str | None = None


# --- totals ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Coverage(Record):
    """Per declared format, scaling and construction: cases run with it; declared values none ran with."""

    format: dict = dataclasses.field(default_factory=dict)
    scaling: dict = dataclasses.field(default_factory=dict)
    construction: dict = dataclasses.field(default_factory=dict)
    not_run: tuple = ()

    _convert = {"not_run": tuple}

    @classmethod
    def of(cls, cases: list, capabilities: dict) -> "Coverage":
        counts = {"format": collections.Counter(), "scaling": collections.Counter(),
                  "construction": collections.Counter()}
        for c in cases:
            model = c.spec.model
            counts["format"][model.recipe.fp8_format.value] += 1
            counts["scaling"][model.scaling] += 1
            counts["construction"][model.construction] += 1
        out = {field: {v: counts[field][v] for v in capabilities.get(field + "s", [])} for field in counts}
        not_run = tuple(f"{field}={v}" for field in counts for v, n in out[field].items() if not n)
        return cls(out["format"], out["scaling"], out["construction"], not_run)

    def text(self) -> str:
        """Cases run per declared value, and the declared values none ran with (summary and page)."""
        fields = (("format", self.format), ("scaling", self.scaling), ("construction", self.construction))
        text = "; ".join(f"{name}s " + ", ".join(f"{v} {n}" for v, n in values.items())
                         for name, values in fields if values)
        if self.not_run:
            text += f"; none with {', '.join(self.not_run)}"
        return text or "-"


@dataclasses.dataclass
class Draws(Record):
    """Cases drawn, and how many the stack's declaration refused (by reason)."""

    draws: int = 0
    declined: int = 0
    declined_reasons: dict = dataclasses.field(default_factory=dict)

    def add(self, draws: int, declined: int, reasons: dict) -> None:
        self.draws += draws
        self.declined += declined
        for reason, n in reasons.items():
            self.declined_reasons[reason] = self.declined_reasons.get(reason, 0) + n


@dataclasses.dataclass
class Timings(Record):
    """Where the run's time went, in seconds."""

    running_s: float = 0.0
    shrink_s: float = 0.0
    verify_s: float = 0.0
    group_start_s: float = 0.0

    def add(self, other: "Timings") -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclasses.dataclass(frozen=True)
class Totals(Record):
    """The run's counts and times (computed from its cases, failures, batches, draws and
    timings by :meth:`of`): what the summary, the progress line and the trend show."""

    cases: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: int = 0
    failing_cases: int = 0
    failures_by_oracle: dict = dataclasses.field(default_factory=dict)
    models_built: int = 0
    reuse_events: int = 0
    steps_compared: int = 0
    retention_warnings: int = 0
    batches: int = 0
    draws: int = 0
    declined_draws: int = 0
    declined_share: float = 0.0
    declined_reasons: dict = dataclasses.field(default_factory=dict)
    coverage: Coverage = Coverage()
    elapsed_s: float = 0.0
    cases_per_s: float = 0.0
    cases_per_s_running: float = 0.0
    running_s: float = 0.0
    shrink_s: float = 0.0
    verify_s: float = 0.0
    group_start_s: float = 0.0
    parts: int | None = None

    _convert = {"coverage": Coverage.from_dict}

    @classmethod
    def of(cls, cases: list, n_failures: int, n_batches: int, draws: Draws, time: Timings, elapsed: float,
           capabilities: dict, rates: tuple | None = None, parts: int | None = None) -> "Totals":
        """``rates``: (cases/s, cases/s while running) given, for a merge (the parts' sums)."""
        outcomes = collections.Counter(c.outcome for c in cases)
        by_oracle = collections.Counter(c.oracle for c in cases if c.oracle)
        running = time.running_s or elapsed
        if rates is None:
            rates = (round(len(cases) / elapsed, 3) if elapsed > 0 else 0.0,
                     round(len(cases) / running, 3) if running > 0 else 0.0)
        return cls(
            cases=len(cases), passed=outcomes.get("passed", 0), failed=outcomes.get("failed", 0),
            errors=outcomes.get("error", 0), skipped=outcomes.get("skipped", 0), failures=n_failures,
            failing_cases=sum(1 for c in cases if c.oracle),
            failures_by_oracle={o: by_oracle[o] for o in sorted(by_oracle, key=precedence)},
            models_built=sum(c.models_built for c in cases), reuse_events=sum(c.reuse_events for c in cases),
            steps_compared=sum(c.steps_compared for c in cases),
            retention_warnings=sum(c.retention_warnings for c in cases), batches=n_batches,
            draws=draws.draws, declined_draws=draws.declined,
            declined_share=round(draws.declined / draws.draws, 4) if draws.draws else 0.0,
            declined_reasons=dict(draws.declined_reasons), coverage=Coverage.of(cases, capabilities),
            elapsed_s=round(elapsed, 2), cases_per_s=rates[0], cases_per_s_running=rates[1],
            running_s=round(time.running_s, 2), shrink_s=round(time.shrink_s, 2), verify_s=round(time.verify_s, 2),
            group_start_s=round(time.group_start_s, 2), parts=parts)

    def timings(self) -> Timings:
        return Timings(self.running_s, self.shrink_s, self.verify_s, self.group_start_s)

    def draw_counts(self) -> Draws:
        return Draws(self.draws, self.declined_draws, dict(self.declined_reasons))


def precedence(oracle: str) -> int:
    return PRECEDENCE.index(oracle) if oracle in PRECEDENCE else len(PRECEDENCE)


# --- the report ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PartInfo(Record):
    """A merged report: one part it was made of."""

    part: str
    folder: str
    complete: bool
    cases: int
    cases_per_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class StreamInfo(Record):
    """Which of the seed's batch streams a run took: ``index`` of ``count``."""

    index: int = 0
    count: int = 1


@dataclasses.dataclass(frozen=True)
class StressConfig(Record):
    """How the run was made: its stack, launcher, seed, budget, stream, and where it ran."""

    sut: str
    launcher: str
    world_size: int
    seed: int
    reuse: str
    sut_options: dict = dataclasses.field(default_factory=dict)
    minutes: float = 0.0
    deadline_s: float = 0.0
    strict: bool = False
    isolation: bool = True
    batch_seconds: float = 0.0
    batch_size: int = 0
    shrink_share: float = 0.0
    shrink_per_failure_s: float = 0.0
    max_cases: int | None = None
    max_failures: int | None = None
    stream: StreamInfo = StreamInfo()
    shard: str | None = None
    groups: int = 1
    group: int | None = None
    group_devices: list | None = None
    capabilities: dict = dataclasses.field(default_factory=dict)
    argv: list = dataclasses.field(default_factory=list)
    cwd: str | None = None
    host: str | None = None
    python: str | None = None
    torch: str | None = None
    hypothesis: str | None = None
    merged_from: tuple = ()

    _convert = {"merged_from": lambda v: tuple(PartInfo.from_dict(p) for p in v), "stream": StreamInfo.from_dict}


@dataclasses.dataclass(frozen=True)
class StressReport(Record):
    """Everything ``stress.json`` holds. ``missing_parts``: a merged report's parts that were not
    given; ``warnings``: what the merge said about its parts, for people."""

    config: StressConfig
    started_at: str
    totals: Totals
    format: str = FORMAT
    seed: int | None = None
    finished_at: str | None = None
    complete: bool = False
    interrupted: str | None = None
    error: str | None = None
    failures: tuple = ()
    batches: tuple = ()
    warnings: tuple = ()
    missing_parts: tuple = ()
    cases: tuple = ()

    _convert = {"config": StressConfig.from_dict, "totals": Totals.from_dict,
                "failures": lambda v: tuple(FailureRecord.from_dict(f) for f in v),
                "batches": lambda v: tuple(Batch.from_dict(b) for b in v),
                "cases": lambda v: tuple(CaseEntry.from_dict(c) for c in v),
                "warnings": tuple, "missing_parts": tuple}

    def header(self) -> dict:
        """Everything but the cases, as plain data, the format first (the writer puts the cases last)."""
        fields = ["format"] + [f.name for f in dataclasses.fields(self) if f.name not in ("format", "cases")]
        return {name: plain(getattr(self, name)) for name in fields}

    def status(self) -> str:
        if self.complete:
            return "complete"
        if self.interrupted:
            return f"interrupted ({self.interrupted})"
        if self.error:
            return f"error: {self.error}"
        return "running or killed"
