"""JUnit XML for CI: one testcase per case, failures carrying the oracle, ranks and detail."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.files import write_atomic
from harness.report.model import RunReport


def write_junit(report: RunReport, path: str) -> None:
    summary = report.summary()
    suite = ET.Element("testsuite", {
        "name": f"harness[{report.sut},{report.launcher},ws{report.world_size}]",
        "tests": str(len(report.cases)), "failures": str(summary["failed"]), "errors": str(summary["errors"]),
        "skipped": str(summary["skipped"]),
        "time": f"{sum(c.duration_s for c in report.cases):.3f}",
    })
    for case in report.cases:
        tc = ET.SubElement(suite, "testcase", {"classname": f"harness.{report.sut}", "name": case.name,
                                                "time": f"{case.duration_s:.3f}"})
        if case.outcome in ("failed", "error"):
            tag = "failure" if case.outcome == "failed" else "error"
            el = ET.SubElement(tc, tag, {"message": f"{case.oracle} on ranks {case.ranks}", "type": case.oracle or ""})
            el.text = f"{case.detail}\n\nreproduce: {case.repro}"
        elif case.outcome == "skipped":
            ET.SubElement(tc, "skipped", {"message": case.skip_reason or case.detail})
        if case.warnings:
            ET.SubElement(tc, "system-out").text = "\n".join(case.warnings)
    write_atomic(path, ET.tostring(ET.ElementTree(suite).getroot(), encoding="unicode"))
