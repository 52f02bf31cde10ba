"""The stress run's record, and its files in the output folder.

``stress.json`` (format ``harness-stress/1``) is rewritten atomically after every case, so a
run that is killed keeps every case it finished. Each case's JSON text is built once and kept,
so a rewrite costs a string join, not a re-serialisation of the whole run. ``junit.xml`` and
``index.html`` (with its plots, also under ``plots/``) are written after each batch and at
the end.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import os
import shutil
import time

from harness.report.html import coverage_text
from harness.report.model import PRECEDENCE, CaseReport, RunReport, write_atomic
from harness.stress.strategies import complexity, describe

FORMAT = "harness-stress/1"
DETAIL_LIMIT = 4000
COMMUNICATION_ORACLES = ("cross-rank", "liveness", "error")


def now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class StressRecord:
    """Everything a stress run has done so far; the writers read it, nothing else."""

    def __init__(self, config: dict, out_dir: str):
        self.config = config
        self.out_dir = out_dir
        self.started_at = now_iso()
        self.t0 = time.monotonic()
        self.cases: list[dict] = []
        self.case_reports: list[CaseReport] = []
        self._case_json: list[str] = []
        self.batches: list[dict] = []
        self.failures: list[dict] = []
        self.complete = False
        self.interrupted: str | None = None
        self.error: str | None = None
        self.finished_at: str | None = None
        self.time = {"running_s": 0.0, "shrink_s": 0.0, "verify_s": 0.0, "group_start_s": 0.0}
        self.draws = 0                       # cases drawn, and how many the stack's declaration refused
        self.declined = 0
        self.declined_reasons: dict[str, int] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # --- adding ------------------------------------------------------------------------------
    def add_case(self, batch: int, index: int, spec, report: CaseReport, started_s: float,
                 failure: int | None, signature: str | None = None) -> dict:
        finished_s = self.elapsed()
        entry = {
            "name": report.name, "batch": batch, "index": index, "outcome": report.outcome,
            "oracle": report.oracle, "oracles": list(report.oracles), "ranks": list(report.ranks),
            "failure": failure, "signature": signature, "reuse_events": report.reuse_events, "models_built": report.models_built,
            "steps_compared": report.steps_compared, "duration_s": round(report.duration_s, 4),
            "wall_s": round(finished_s - started_s, 4), "started_s": round(started_s, 3),
            "finished_s": round(finished_s, 3), "retention_warnings": len(report.warnings),
            "describe": describe(spec), "spec": spec.to_dict(),
            "skip_reason": report.skip_reason,
            "detail": report.detail[:DETAIL_LIMIT] + ("\n... (truncated)" if len(report.detail) > DETAIL_LIMIT else ""),
        }
        self.cases.append(entry)
        # kept for the JUnit report; a night of cases would hold every case's tensor table in memory
        self.case_reports.append(dataclasses.replace(report, tensors={}) if report.tensors else report)
        self._case_json.append(json.dumps(entry, separators=(",", ":")))
        return entry

    def add_draws(self, drawn) -> None:
        """Count a batch's draws (:class:`harness.stress.explore.DrawnBatch`)."""
        self.draws += drawn.draws
        self.declined += drawn.declined
        for reason, n in drawn.declined_reasons.items():
            self.declined_reasons[reason] = self.declined_reasons.get(reason, 0) + n

    def coverage(self) -> dict:
        """Per declared format, scaling and construction: how many cases ran with it; and which
        declared values no case ran with yet (``not_run``)."""
        declared = self.config.get("capabilities") or {}
        counts = {"format": collections.Counter(), "scaling": collections.Counter(),
                  "construction": collections.Counter()}
        for c in self.cases:
            model = c["spec"]["model"]
            counts["format"][model["recipe"]["fp8_format"]] += 1
            counts["scaling"][model.get("scaling", "delayed")] += 1
            counts["construction"][model["construction"]] += 1
        out = {field: {v: counts[field][v] for v in declared.get(field + "s", [])} for field in counts}
        out["not_run"] = [f"{field}={v}" for field in counts for v, n in out[field].items() if not n]
        return out

    def new_failure(self, oracle: str, case_entry: dict, spec, prefix_len: int, signature: str | None = None) -> dict:
        failure = {
            "n": len(self.failures) + 1, "oracle": oracle, "signature": signature or oracle,
            "first_case": case_entry["name"],
            "cases": [case_entry["name"]], "count": 1, "found_s": case_entry["finished_s"],
            "detail": case_entry["detail"], "original": {"spec": spec.to_dict(), "describe": describe(spec),
                                                          **complexity(spec), "preceding_cases": prefix_len},
            "status": "found", "repro": None, "replay": None,
        }
        self.failures.append(failure)
        return failure

    def failure_for(self, signature: str) -> dict | None:
        """The failure with this signature (:mod:`harness.stress.signature`), if one was found."""
        for f in self.failures:
            if f["signature"] == signature:
                return f
        return None

    # --- reading -----------------------------------------------------------------------------
    def totals(self) -> dict:
        outcomes = collections.Counter(c["outcome"] for c in self.cases)
        by_oracle = collections.Counter(c["oracle"] for c in self.cases if c["oracle"])
        elapsed = self.elapsed() if self.finished_at is None else self._elapsed_final
        running = self.time["running_s"] or elapsed
        return {
            "cases": len(self.cases), "passed": outcomes.get("passed", 0), "failed": outcomes.get("failed", 0),
            "errors": outcomes.get("error", 0), "failures": len(self.failures),
            "skipped": outcomes.get("skipped", 0),
            "failing_cases": sum(1 for c in self.cases if c["oracle"]),
            "failures_by_oracle": {o: by_oracle[o] for o in sorted(by_oracle, key=_precedence)},
            "models_built": sum(c["models_built"] for c in self.cases),
            "reuse_events": sum(c["reuse_events"] for c in self.cases),
            "steps_compared": sum(c["steps_compared"] for c in self.cases),
            "retention_warnings": sum(c["retention_warnings"] for c in self.cases),
            "batches": len(self.batches),
            "draws": self.draws, "declined_draws": self.declined,
            "declined_share": round(self.declined / self.draws, 4) if self.draws else 0.0,
            "declined_reasons": dict(self.declined_reasons),
            "coverage": self.coverage(),
            "elapsed_s": round(elapsed, 2),
            "cases_per_s": round(len(self.cases) / elapsed, 3) if elapsed > 0 else 0.0,
            "cases_per_s_running": round(len(self.cases) / running, 3) if running > 0 else 0.0,
            **{k: round(v, 2) for k, v in self.time.items()},
        }

    def header(self) -> dict:
        return {"format": FORMAT, "seed": self.config.get("seed"), "config": self.config, "started_at": self.started_at,
                "finished_at": self.finished_at, "complete": self.complete, "interrupted": self.interrupted,
                "error": self.error, "totals": self.totals(), "failures": self.failures, "batches": self.batches}

    def to_dict(self) -> dict:
        """The whole record as plain data (what ``stress.json`` holds)."""
        return dict(self.header(), cases=self.cases)

    def json_text(self) -> str:
        head = json.dumps(self.header(), indent=1)
        # Splice the cached case texts in as the last key, one case per line.
        cases = "[\n" + ",\n".join(self._case_json) + "\n ]" if self._case_json else "[]"
        return head[:-2] + ',\n "cases": ' + cases + "\n}\n"

    def run_report(self) -> RunReport:
        """The cases as a RunReport (for the JUnit writer), repro commands filled in."""
        cfg = self.config
        report = RunReport(cfg["sut"], cfg["launcher"], cfg["world_size"], cfg["seed"], cfg["reuse"],
                           complete=self.complete, interrupted=self.interrupted)
        by_n = {f["n"]: f for f in self.failures}
        for entry, case in zip(self.cases, self.case_reports):
            f = by_n.get(entry["failure"]) if entry["failure"] else None
            if f is not None and case.outcome in ("failed", "error"):
                command = (f.get("repro") or {}).get("command") or (f.get("replay") or {}).get("command") or ""
                case.repro = command
            report.cases.append(case)
        return report

    # --- writing -----------------------------------------------------------------------------
    def finish(self) -> None:
        self._elapsed_final = self.elapsed()
        self.finished_at = now_iso()

    def path(self, name: str) -> str:
        return os.path.join(self.out_dir, name)

    def write_json(self) -> None:
        write_atomic(self.path("stress.json"), self.json_text())
        publish(self.path("stress.json"))

    def write_junit(self) -> None:
        from harness.report.junit import write_junit

        write_junit(self.run_report(), self.path("junit.xml"))
        publish(self.path("junit.xml"))

    def write_html(self) -> None:
        """index.html, plots embedded, and the plots as files under plots/."""
        from harness.report.html import write_stress_html

        write_stress_html(self.to_dict(), self.path("index.html"), plots_dir=self.path("plots"))
        publish(self.path("index.html"))


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


def declaration_lines(totals: dict) -> list[str]:
    """The summary's lines on the declared space: skipped cases, declined draws, what ran of it."""
    lines = []
    if totals.get("skipped"):
        lines.append(f"{totals['skipped']} cases skipped (not run, not failures; each case gives its skip_reason)")
    lines.append(f"declined draws: {totals['declined_draws']} of {totals['draws']} "
                 f"({100 * totals['declined_share']:.1f}%); cases run by declared "
                 f"{coverage_text(totals.get('coverage') or {})}")
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


def _precedence(oracle: str) -> int:
    return PRECEDENCE.index(oracle) if oracle in PRECEDENCE else len(PRECEDENCE)
