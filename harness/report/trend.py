"""``python -m harness report DIR1 DIR2 ...``: the trend over several stress runs (nights).

Reads each folder's ``stress.json`` (or a ``stress.json`` path given directly), prints one row
per run in date order (date, stack, cases, failing cases by oracle, reuse events, models built,
cases/s, status) and, with ``--html PATH``, writes a page with the same table and plots.
Unreadable folders are named on stderr and skipped; none readable is an error (exit 2).
"""

from __future__ import annotations

import json
import os
import sys

from harness.errors import OneLineParser, UsageError

HEADERS = ["date", "stack", "cases", "failures by oracle", "reuse events", "models built", "cases/s", "status"]


def load_run(path: str) -> dict:
    """One stress record, with ``label`` and ``source`` added; raises UsageError when unreadable."""
    file = os.path.join(path, "stress.json") if os.path.isdir(path) else path
    try:
        with open(file) as fh:
            data = json.load(fh)
    except OSError as exc:
        raise UsageError(f"{file}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict) or not str(data.get("format", "")).startswith("harness-stress/"):
        raise UsageError(f"{file} is not a stress report (no 'format: harness-stress/...')")
    data["source"] = file
    data["label"] = data.get("started_at", "")[:16].replace("T", " ")
    return data


def row(run: dict) -> list[str]:
    t = run["totals"]
    by_oracle = " ".join(f"{o}:{n}" for o, n in t.get("failures_by_oracle", {}).items()) or "-"
    status = "complete" if run.get("complete") else ("interrupted" if run.get("interrupted") else
                                                     ("error" if run.get("error") else "killed"))
    return [run["label"], run["config"]["sut"], str(t["cases"]), by_oracle, str(t["reuse_events"]),
            str(t["models_built"]), f"{t['cases_per_s']:.2f}", status]


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
    runs.sort(key=lambda r: (r.get("started_at", ""), r["source"]))
    rows = [row(r) for r in runs]
    print(format_table(rows))
    if args.html:
        from harness.report.html import render_trend_html
        from harness.report.model import write_atomic
        from harness.report.model import check_writable

        check_writable(args.html, "--html")
        write_atomic(args.html, render_trend_html(runs, rows, HEADERS))
        print(f"trend page: {args.html}")
    return 0
