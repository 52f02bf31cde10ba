"""Case verdicts built from every rank's result, and the run report they make up.

A case's ``oracle`` is the first failing oracle in the order of
:class:`~harness.oracles.findings.Oracle`: the collective ledger's verdicts first
(``cross-rank``, ``liveness``), since a misaligned collective explains everything after it,
then ``buffer-integrity``, ``reference``, ``isolation``, ``hygiene``, ``retention``.
``oracles`` lists every oracle that failed. Reports only hold what the runner produced: the
runner (:mod:`harness.runner.session`) fills them case by case.
"""

from __future__ import annotations

import dataclasses
import json
import os

from harness.errors import UsageError
from harness.files import write_atomic
from harness.oracles.findings import PRECEDENCE, Failure, Oracle
from harness.oracles.retention import is_retention_warning


# The JSON report's format. 2: every case carries its tensor table ("tensors",
# harness.report.tensors) and "forced_reuse"; the report names its "format_version" (a report
# without one is of format 1). ``python -m harness diff`` reads format 2 only.
FORMAT_VERSION = 2


@dataclasses.dataclass
class CaseReport:
    name: str
    outcome: str                 # passed | failed | error | skipped
    oracle: str | None = None
    oracles: list = dataclasses.field(default_factory=list)
    ranks: list = dataclasses.field(default_factory=list)
    reuse_events: int = 0
    detail: str = ""
    repro: str = ""
    warnings: list = dataclasses.field(default_factory=list)
    steps_compared: int = 0
    models_built: int = 0
    digest: str = ""
    duration_s: float = 0.0
    failures: list = dataclasses.field(default_factory=list)
    artifacts: dict = dataclasses.field(default_factory=dict)
    reuse_misses: int = 0        # forced reuses that did not land (see harness.idreuse.morgue)
    shell_misses: list = dataclasses.field(default_factory=list)   # lines: dead model objects no shell landed on (harness.idreuse.shells)
    skip_reason: str = ""        # why a skipped case did not run (e.g. the stack declines it)
    forced_reuse: str = ""       # the case forces id reuse of its own (CaseSpec.reuse), whatever the run's --reuse
    tensors: dict = dataclasses.field(default_factory=dict)   # every recorded tensor's token (harness.report.tensors)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["failures"] = [f.to_dict() if isinstance(f, Failure) else f for f in self.failures]
        return d


def skipped(name: str, reason: str, repro: str = "", forced_reuse: str = "") -> CaseReport:
    """The report of a case that did not run, and why: never a failure, never shrunk.

    The runners make one when the stack declines a case (see
    :func:`harness.stacks.capabilities.declined_reason`); any other reason a case is not run
    goes the same way.
    """
    if not reason:
        raise ValueError("a skipped case needs its reason")
    return CaseReport(name, "skipped", repro=repro, skip_reason=reason, forced_reuse=forced_reuse)


def verdict(name: str, failures: list[Failure], *, reuse_events: int, repro: str, warnings=(),
            steps_compared=0, models_built=0, digest="", duration_s=0.0, artifacts=None,
            reuse_misses=0, forced_reuse="", tensors=None, shell_misses=()) -> CaseReport:
    failures = list(failures)
    if not failures:
        return CaseReport(name, "passed", reuse_events=reuse_events, repro=repro, warnings=list(warnings),
                          steps_compared=steps_compared, models_built=models_built, digest=digest,
                          duration_s=duration_s, artifacts=artifacts or {}, reuse_misses=reuse_misses,
                          forced_reuse=forced_reuse, tensors=tensors or {}, shell_misses=list(shell_misses))
    oracles = sorted({f.oracle for f in failures}, key=lambda o: PRECEDENCE.index(o) if o in PRECEDENCE else 99)
    primary = oracles[0]
    outcome = "error" if primary == "error" else "failed"
    ranks = sorted({f.rank for f in failures if f.rank is not None})
    ordered = sorted(failures, key=lambda f: (PRECEDENCE.index(f.oracle) if f.oracle in PRECEDENCE else 99,
                                              f.rank if f.rank is not None else -1))
    detail = "\n".join(f.line() for f in ordered[:12])
    if len(ordered) > 12:
        detail += f"\n... and {len(ordered) - 12} more findings"
    return CaseReport(name, outcome, primary, oracles, ranks, reuse_events, detail, repro, list(warnings),
                      steps_compared, models_built, digest, duration_s, ordered, artifacts or {}, reuse_misses,
                      forced_reuse=forced_reuse, tensors=tensors or {}, shell_misses=list(shell_misses))


@dataclasses.dataclass
class RunReport:
    sut: str
    launcher: str
    world_size: int
    seed: int
    reuse: str
    cases: list = dataclasses.field(default_factory=list)
    complete: bool = False
    interrupted: str | None = None
    stack_info: dict = dataclasses.field(default_factory=dict)   # e.g. the TE version that ran

    def summary(self) -> dict:
        counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        for c in self.cases:
            key = {"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped"}[c.outcome]
            counts[key] += 1
        return counts

    def to_dict(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "sut": self.sut, "launcher": self.launcher, "world_size": self.world_size, "seed": self.seed,
            "reuse": self.reuse, "complete": self.complete, "interrupted": self.interrupted,
            "stack_info": dict(self.stack_info),
            "summary": self.summary(),
            "totals": {
                "cases": len(self.cases),
                "steps_compared": sum(c.steps_compared for c in self.cases),
                "models_built": sum(c.models_built for c in self.cases),
                "reuse_events": sum(c.reuse_events for c in self.cases),
                "reuse_misses": sum(c.reuse_misses for c in self.cases),
                "shell_misses": sum(len(c.shell_misses) for c in self.cases),
                "retention_warnings": sum(map(is_retention_warning, (w for c in self.cases for w in c.warnings))),
                "retention_failures": sum(Oracle.RETENTION in (c.oracles or ()) for c in self.cases),
            },
            "cases": [c.to_dict() for c in self.cases],
        }


def group_digest(results: dict) -> str:
    """One digest for a case over every rank's result digest, in rank order (launcher-independent)."""
    import hashlib

    if not results:
        return ""
    if len(results) == 1:
        return next(iter(results.values())).digest
    joined = "|".join(f"{r}:{results[r].digest}" for r in sorted(results))
    return hashlib.sha256(joined.encode()).hexdigest()[:32]


def check_writable(path: str, flag: str) -> None:
    """UsageError (one line) unless a report can be written at ``path`` (given as ``flag``)."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory; give a file path")
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{flag} {path!r}: folder {folder!r} is not writable")
    if os.path.lexists(path) and not os.path.isfile(path):
        # The report is written beside it and renamed over it: a device or a pipe would be replaced.
        raise UsageError(f"{flag} {path!r} exists and is not a regular file; give a file path")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path!r} exists and is not writable")


def case_from_dict(data: dict) -> CaseReport:
    """A case of a JSON run report (:meth:`CaseReport.to_dict`), its failures as :class:`Failure`."""
    known = {f.name for f in dataclasses.fields(CaseReport)}
    fields = {k: v for k, v in data.items() if k in known}
    fields["failures"] = [Failure.from_dict(f) for f in data.get("failures") or []]
    return CaseReport(**fields)


def read_case(path: str, name: str) -> CaseReport | None:
    """Case ``name`` of the JSON run report at ``path``, or None when it holds no such case."""
    with open(path) as fh:
        data = json.load(fh)
    return next((case_from_dict(c) for c in data.get("cases", []) if c.get("name") == name), None)


def write_json(report: RunReport, path: str) -> None:
    write_atomic(path, json.dumps(report.to_dict(), indent=1, sort_keys=False))
