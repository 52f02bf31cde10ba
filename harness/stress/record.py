"""The stress run's record as it grows, and its files in the output folder.

:class:`StressRecord` collects the run's cases, failures and batches (the typed records of
:mod:`harness.report.stress_model`) and gives a :class:`~harness.report.stress_model.StressReport`
of them at any moment. ``stress.json`` is rewritten atomically after every case (by its one
writer, :class:`~harness.report.stress_file.StressFile`), so a run that is killed keeps every case
it finished. ``junit.xml`` and ``index.html`` (with its plots, also under ``plots/``) are written
after each batch and at the end; :func:`write_reports` writes all three for a merge too.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import time

from harness.oracles.retention import is_retention_warning
from harness.report.model import CaseReport, RunReport
from harness.report.stress_file import StressFile
from harness.report.stress_failure import FailureRecord, Original
from harness.report.stress_model import Batch, CaseEntry, Draws, StressConfig, StressReport, Timings, Totals
from harness.stress.strategies import complexity, describe

DETAIL_LIMIT = 4000


def now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class StressRecord:
    """Everything a stress run has done so far; the writers read its :meth:`report`."""

    def __init__(self, config: StressConfig, out_dir: str):
        self.config = config
        self.out_dir = out_dir
        self.started_at = now_iso()
        self.t0 = time.monotonic()
        self.cases: list[CaseEntry] = []
        self.case_reports: list[CaseReport] = []
        self.batches: list[Batch] = []
        self.failures: list[FailureRecord] = []
        self.complete = False
        self.interrupted: str | None = None
        self.error: str | None = None
        self.finished_at: str | None = None
        self.time = Timings()
        self.draws = Draws()
        self._elapsed_final: float | None = None
        self._file = StressFile(os.path.join(out_dir, "stress.json"))

    def elapsed(self) -> float:
        return time.monotonic() - self.t0 if self._elapsed_final is None else self._elapsed_final

    # --- adding ------------------------------------------------------------------------------
    def add_case(self, batch: int, index: int, spec, report: CaseReport, started_s: float,
                 failure: int | None, signature: str | None = None) -> CaseEntry:
        finished_s = self.elapsed()
        detail = report.detail[:DETAIL_LIMIT] + ("\n... (truncated)" if len(report.detail) > DETAIL_LIMIT else "")
        entry = CaseEntry(
            name=report.name, batch=batch, index=index, outcome=report.outcome, oracle=report.oracle,
            spec=spec, describe=describe(spec), oracles=tuple(report.oracles), ranks=tuple(report.ranks),
            failure=failure, signature=signature, reuse_events=report.reuse_events,
            models_built=report.models_built, steps_compared=report.steps_compared,
            duration_s=round(report.duration_s, 4), wall_s=round(finished_s - started_s, 4),
            started_s=round(started_s, 3), finished_s=round(finished_s, 3),
            retention_warnings=sum(map(is_retention_warning, report.warnings)), skip_reason=report.skip_reason, detail=detail)
        self.cases.append(entry)
        # kept for the JUnit report; a night of cases would hold every case's tensor table in memory
        self.case_reports.append(dataclasses.replace(report, tensors={}) if report.tensors else report)
        return entry

    def add_draws(self, drawn) -> None:
        """Count a batch's draws (:class:`harness.stress.explore.DrawnBatch`)."""
        self.draws.add(drawn.draws, drawn.declined, drawn.declined_reasons)

    def new_failure(self, oracle: str, entry: CaseEntry, spec, prefix_len: int, signature: str) -> FailureRecord:
        failure = FailureRecord(
            n=len(self.failures) + 1, oracle=oracle, signature=signature, first_case=entry.name,
            found_s=entry.finished_s, detail=entry.detail, cases=[entry.name],
            original=Original(spec=spec, describe=describe(spec), preceding_cases=prefix_len, **complexity(spec)))
        self.failures.append(failure)
        return failure

    def failure_for(self, signature: str) -> FailureRecord | None:
        """The failure with this signature (:mod:`harness.stress.signature`), if one was found."""
        return next((f for f in self.failures if f.signature == signature), None)

    # --- reading -----------------------------------------------------------------------------
    def totals(self) -> Totals:
        return Totals.of(self.cases, len(self.failures), len(self.batches), self.draws, self.time, self.elapsed(),
                         self.config.capabilities)

    def report(self) -> StressReport:
        return StressReport(
            config=self.config, started_at=self.started_at, totals=self.totals(), seed=self.config.seed,
            finished_at=self.finished_at, complete=self.complete, interrupted=self.interrupted, error=self.error,
            failures=tuple(self.failures), batches=tuple(self.batches), cases=tuple(self.cases))

    # --- writing -----------------------------------------------------------------------------
    def finish(self) -> None:
        self._elapsed_final = self.elapsed()
        self.finished_at = now_iso()

    def write_json(self) -> None:
        write_json_of(self.report(), self._file)

    def write_junit(self) -> None:
        write_junit_of(self.report(), self.case_reports, self.out_dir)

    def write_html(self) -> None:
        write_html_of(self.report(), self.out_dir)


def run_report(report: StressReport, case_reports: list[CaseReport]) -> RunReport:
    """The cases as a RunReport (for the JUnit writer), repro commands filled in."""
    cfg = report.config
    out = RunReport(cfg.sut, cfg.launcher, cfg.world_size, cfg.seed, cfg.reuse, complete=report.complete,
                    interrupted=report.interrupted)
    by_n = {f.n: f for f in report.failures}
    for entry, case in zip(report.cases, case_reports):
        f = by_n.get(entry.failure) if entry.failure else None
        if f is not None and case.outcome in ("failed", "error"):
            case.repro = ((f.repro.command if f.repro is not None else "")
                          or (f.replay.command if f.replay is not None else "") or "")
        out.cases.append(case)
    return out


def case_report_of(entry: CaseEntry) -> CaseReport:
    """A merged case's report for the JUnit writer, from what ``stress.json`` kept of it."""
    return CaseReport(name=entry.name, outcome=entry.outcome, oracle=entry.oracle, oracles=list(entry.oracles),
                      ranks=list(entry.ranks), reuse_events=entry.reuse_events, detail=entry.detail,
                      steps_compared=entry.steps_compared, models_built=entry.models_built,
                      duration_s=entry.duration_s, skip_reason=entry.skip_reason)


def write_json_of(report: StressReport, json_file: StressFile) -> None:
    json_file.write(report)
    publish(json_file.path)


def write_junit_of(report: StressReport, case_reports: list[CaseReport], out_dir: str) -> None:
    from harness.report.junit import write_junit

    path = os.path.join(out_dir, "junit.xml")
    write_junit(run_report(report, case_reports), path)
    publish(path)


def write_html_of(report: StressReport, out_dir: str) -> None:
    """index.html, plots embedded, and the plots as files under plots/."""
    from harness.report.html import write_stress_html

    path = os.path.join(out_dir, "index.html")
    write_stress_html(report, path, plots_dir=os.path.join(out_dir, "plots"))
    publish(path)


def clear_previous(out_dir: str, run_folders: bool = True) -> None:
    """Remove what an earlier stress run or merge left in ``out_dir`` (only the files they write);
    ``run_folders=False`` (a merge) leaves a run's ``batches``, ``claims`` and ``group-<g>`` alone:
    a ``--groups`` run merges its own group folders into ``out_dir``."""
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if name in ("stress.json", "junit.xml", "index.html") or (name.startswith("repro-") and name.endswith(".json")):
            os.unlink(path)
        elif name == "plots" and os.path.isdir(path):
            shutil.rmtree(path)
        elif run_folders and (name in ("batches", "claims") or name.startswith("group-")) and os.path.isdir(path):
            shutil.rmtree(path)


def declaration_lines(totals: Totals) -> list[str]:
    """The summary's lines on the declared space: skipped cases, declined draws, what ran of it."""
    lines = []
    if totals.skipped:
        lines.append(f"{totals.skipped} cases skipped (not run, not failures; each case gives its skip_reason)")
    lines.append(f"declined draws: {totals.declined_draws} of {totals.draws} "
                 f"({100 * totals.declined_share:.1f}%); cases run by declared {totals.coverage.text()}")
    return lines


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()


def publish(path: str) -> None:
    """Reports are for reading: the mode a plain new file gets, not a temp file's private 0600."""
    try:
        os.chmod(path, _MODE)
    except OSError:
        pass
