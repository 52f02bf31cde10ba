"""The summary a stress run (or a merge) prints on stdout when it ends: totals, failures, commands.

Called by :mod:`harness.stress.cli` after a run, by :mod:`harness.stress.groups` after its groups
are merged, and by :mod:`harness.stress.merge`.
"""

from __future__ import annotations

import os
import sys

from harness.report.stress_model import StressReport
from harness.stress.record import declaration_lines


def print_summary(report: StressReport, out_dir: str, stream=None) -> None:
    out = stream or sys.stdout
    t = report.totals
    print(f"\n{t.cases} cases in {t.batches} batches, {t.models_built} models built, {t.reuse_events} "
          f"reuse events, {t.steps_compared} steps compared bitwise, {t.cases_per_s:.2f} cases/s "
          f"({t.elapsed_s:.0f} s)", file=out)
    by_oracle = ", ".join(f"{o} {n}" for o, n in t.failures_by_oracle.items()) or "none"
    print(f"{t.failing_cases} failing cases ({by_oracle}), {t.failures} distinct failures", file=out)
    for line in declaration_lines(t):
        print(line, file=out)
    if t.reuse_events == 0 and t.cases:
        print("note: no id was reused in this run, so the id-reuse bug class was not exercised", file=out)
    for f in report.failures:
        repro = f.repro
        state = {True: "reproduces", False: "did NOT reproduce in a fresh process", None: "not checked"}[
            repro.verified if repro is not None else None]
        v = repro.verification if repro is not None else None
        if v is not None and v.runs > 1:
            state += f" ({v.reproduced_runs} of {v.runs} fresh runs, natural reuse)"
        kind, cases = (repro.kind, repro.cases) if repro is not None else ("?", "?")
        pinned = repro.reuse_pinned if repro is not None else None
        print(f"\nfailure #{f.n} [{f.oracle}] {f.count} case{'s' * (f.count != 1)}, first "
              f"{f.first_case}; repro ({kind}, {cases} case{'s' * (cases != 1)}"
              f"{', id reuse pinned to ' + pinned if pinned else ''}, {state}):", file=out)
        print(f"  {repro.command if repro is not None else '(none)'}", file=out)
        if f.signature and f.signature != f.oracle:
            print(f"  signature: {f.signature}", file=out)
    if report.interrupted:
        print(f"\ninterrupted: {report.interrupted}", file=out)
    print(f"\nreports: {os.path.join(out_dir, 'stress.json')}, junit.xml, index.html", file=out)
