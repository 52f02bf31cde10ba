"""The terminal summary: a line per case, the failures in full, the totals and what to run next."""

from __future__ import annotations

import sys

from harness.report.model import RunReport

_MARK = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}


def case_line(case) -> str:
    extra = f"  [{case.oracle} on ranks {','.join(map(str, case.ranks))}]" if case.oracle else ""
    reuse = f" reuse={case.reuse_events}" if case.reuse_events else ""
    reuse += f" reuse-missed={case.reuse_misses}" if case.reuse_misses else ""
    reuse += f" shell-missed={len(case.shell_misses)}" if case.shell_misses else ""
    if case.outcome == "skipped":
        return f"{_MARK[case.outcome]:5} {case.name}  ({case.skip_reason})"
    return f"{_MARK[case.outcome]:5} {case.name}  ({case.duration_s:.2f}s{reuse}){extra}"


def skip_reasons(cases) -> dict[str, int]:
    """Skip reason -> how many cases it skipped, in the order first seen."""
    counts: dict[str, int] = {}
    for case in cases:
        if case.outcome == "skipped":
            counts[case.skip_reason] = counts.get(case.skip_reason, 0) + 1
    return counts


def print_summary(report: RunReport, stream=None) -> None:
    out = stream or sys.stdout
    d = report.to_dict()
    failed = [c for c in report.cases if c.outcome in ("failed", "error")]
    for case in failed:
        print(f"\n--- {case.name}: {case.outcome} ({case.oracle}) ---", file=out)
        print(case.detail, file=out)
        print(f"reproduce: {case.repro}", file=out)
    t, s = d["totals"], d["summary"]
    print("", file=out)
    print(f"stack {report.sut}, launcher {report.launcher}, world size {report.world_size}, seed {report.seed}, "
          f"reuse {report.reuse}", file=out)
    info = getattr(report, "stack_info", None) or {}
    if "te_version" in info:
        standins = ", ".join(info.get("onnx_standins") or []) or "none"
        print(f"Transformer Engine {info['te_version'] or '(version unknown)'}, ONNX stand-ins: {standins}", file=out)
    if "placement" in info:
        print(f"placement: {info['placement']['description']}", file=out)
    print(f"{t['cases']} cases, {t['models_built']} models built, {t['steps_compared']} steps compared bitwise, "
          f"{t['reuse_events']} reuse events, {t['retention_warnings']} retention warnings"
          f"{'' if not t.get('retention_failures') else ', %d retention failures' % t['retention_failures']}", file=out)
    if t["reuse_events"] == 0 and t["cases"]:
        print("note: no id was reused in this run, so the id-reuse oracles were not exercised; forced reuse "
              "(--reuse symmetric or asymmetric) needs at least two models built in one process", file=out)
    if t["reuse_misses"]:
        print(f"note: {t['reuse_misses']} forced reuse(s) did not land on the new model (reuse-missed=N above): "
              "a failure that needs that reuse may not have happened in those cases; see harness/idreuse/morgue.py",
              file=out)
    if t.get("shell_misses"):
        print(f"note: {t['shell_misses']} dead model object(s) got no shell (shell-missed=N above), so the next "
              "model's objects of their classes were not born on the dead ones' addresses:", file=out)
        for case in report.cases:
            for line in case.shell_misses:
                print(f"  {case.name}: {line}", file=out)
    if t["retention_warnings"]:
        print("note: retention warnings mean registries keep dead models' state alive; --strict makes them failures "
              "unless the stack keeps that registry on purpose (retained_on_purpose)",
              file=out)
    for reason, count in skip_reasons(report.cases).items():
        print(f"skipped: {count} case{'s' * (count != 1)}: {reason}", file=out)
    if report.interrupted:
        print(f"interrupted: {report.interrupted}", file=out)
    print(f"{s['passed']} passed, {s['failed']} failed, {s['errors']} errors, {s['skipped']} skipped", file=out)
