"""Findings as text or JSON, one finding per registry.

Text: a header ``file:line:col: CODE title: registry (N stores, M reads) (severity)`` at the
registry's first use, then indented lines: ``why:`` and ``fix:`` for a hazard (``safe:`` with
the reason otherwise), and one line per use with its role and whole expression. A header is
what editors and CI annotators match (``file:line:col: ``); the indented lines are for people.
JSON: one record per registry with ``why``, ``fix`` and ``uses``.
"""

from __future__ import annotations

import json

from harness.scan.finding import RegistryFinding, Severity

_INDENT = "    "


def format_text(findings: list[RegistryFinding]) -> str:
    lines = []
    for finding in findings:
        first = finding.first
        lines.append(f"{first.path}:{first.line}:{first.col}: {first.code.label} {finding.headline()}")
        if not finding.name:
            continue
        if finding.severity is Severity.HAZARD:
            lines.append(f"{_INDENT}why: {finding.why}")
            lines.append(f"{_INDENT}confidence: {finding.confidence.value}: {finding.confidence_reason}")
            lines.append(f"{_INDENT}fix: {finding.fix}")
        else:
            lines.append(f"{_INDENT}safe: {finding.why}")
        for use in finding.uses:
            lines.append(f"{_INDENT}{use.role:<6} {use.path}:{use.line}:{use.col}: {use.code.label} {use.subject}")
    return "".join(line + "\n" for line in lines)


def format_json(findings: list[RegistryFinding]) -> str:
    return json.dumps([f.as_dict() for f in findings], indent=2) + "\n"
