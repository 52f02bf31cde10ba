"""``python -m harness report DIR1 DIR2 ...``: the trend over several stress runs (nights).

Reads each folder's ``stress.json`` (or a ``stress.json`` path given directly), prints one row
per run in date order (date, stack, cases, failing cases by oracle, reuse events, models built,
cases/s, status) and, with ``--html PATH``, writes a page with the same table and plots.
Unreadable folders are named on stderr and skipped; none readable is an error (exit 2).
"""

from __future__ import annotations

import dataclasses
import sys

from harness.errors import OneLineParser, UsageError
from harness.report.stress_file import read_report, report_path
from harness.report.stress_model import StressReport

HEADERS = ["date", "stack", "cases", "failures by oracle", "reuse events", "models built", "cases/s", "status"]


@dataclasses.dataclass(frozen=True)
class TrendRun:
    """One night: its report, the file it came from, and its label (its start, to the minute)."""

    report: StressReport
    source: str

    @property
    def label(self) -> str:
        return self.report.started_at[:16].replace("T", " ")


def load_run(path: str) -> TrendRun:
    """One stress report (reports of earlier formats too); raises UsageError when unreadable."""
    return TrendRun(read_report(path, old_formats=True), report_path(path))


def row(run: TrendRun) -> list[str]:
    r = run.report
    t = r.totals
    by_oracle = " ".join(f"{o}:{n}" for o, n in t.failures_by_oracle.items()) or "-"
    status = "complete" if r.complete else ("interrupted" if r.interrupted else ("error" if r.error else "killed"))
    return [run.label, r.config.sut, str(t.cases), by_oracle, str(t.reuse_events), str(t.models_built),
            f"{t.cases_per_s:.2f}", status]


def format_table(rows: list[list[str]], headers=HEADERS) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = {2, 4, 5, 6}

    def fmt(cells):
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [fmt(headers), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def main(argv=None) -> int:
    p = OneLineParser(prog="python -m harness report", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="DIR", help="stress output folders (or their stress.json files)")
    p.add_argument("--html", default=None, metavar="PATH", help="also write an HTML trend page here")
    args = p.parse_args(argv)
    runs = []
    for path in args.runs:
        try:
            runs.append(load_run(path))
        except UsageError as exc:
            print(f"skipped: {exc}", file=sys.stderr)
    if not runs:
        raise UsageError("no readable stress report among the folders given")
    runs.sort(key=lambda r: (r.report.started_at, r.source))
    rows = [row(r) for r in runs]
    print(format_table(rows))
    if args.html:
        from harness.report.html import render_trend_html
        from harness.files import write_atomic
        from harness.report.model import check_writable

        check_writable(args.html, "--html")
        write_atomic(args.html, render_trend_html(runs, rows, HEADERS))
        print(f"trend page: {args.html}")
    return 0
