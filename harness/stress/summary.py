"""The summary a stress run (or a merge) prints on stdout when it ends: totals, failures, commands.

Called by :mod:`harness.stress.cli` after a run, by :mod:`harness.stress.groups` after its groups
are merged, and by :mod:`harness.stress.merge`.
"""

from __future__ import annotations

import os
import sys

from harness.stress.record import declaration_lines


def print_summary(record, stream=None) -> None:
    out = stream or sys.stdout
    t = record.totals()
    print(f"\n{t['cases']} cases in {t['batches']} batches, {t['models_built']} models built, {t['reuse_events']} "
          f"reuse events, {t['steps_compared']} steps compared bitwise, {t['cases_per_s']:.2f} cases/s "
          f"({t['elapsed_s']:.0f} s)", file=out)
    by_oracle = ", ".join(f"{o} {n}" for o, n in t["failures_by_oracle"].items()) or "none"
    print(f"{t['failing_cases']} failing cases ({by_oracle}), {t['failures']} distinct failures", file=out)
    for line in declaration_lines(t):
        print(line, file=out)
    if t["reuse_events"] == 0 and t["cases"]:
        print("note: no id was reused in this run, so the id-reuse bug class was not exercised", file=out)
    for f in record.failures:
        repro = f.get("repro") or {}
        state = {True: "reproduces", False: "did NOT reproduce in a fresh process", None: "not checked"}[
            repro.get("verified")]
        v = repro.get("verification") or {}
        if v.get("runs", 1) > 1:
            state += f" ({v.get('reproduced_runs')} of {v['runs']} fresh runs, natural reuse)"
        print(f"\nfailure #{f['n']} [{f['oracle']}] {f['count']} case{'s' * (f['count'] != 1)}, first "
              f"{f['first_case']}; repro ({repro.get('kind', '?')}, {repro.get('cases', '?')} case"
              f"{'s' * (repro.get('cases') != 1)}"
              f"{', id reuse pinned to ' + repro['reuse_pinned'] if repro.get('reuse_pinned') else ''}, {state}):", file=out)
        print(f"  {repro.get('command', '(none)')}", file=out)
        if f.get("signature") and f["signature"] != f["oracle"]:
            print(f"  signature: {f['signature']}", file=out)
    if record.interrupted:
        print(f"\ninterrupted: {record.interrupted}", file=out)
    print(f"\nreports: {os.path.join(record.out_dir, 'stress.json')}, junit.xml, index.html", file=out)
