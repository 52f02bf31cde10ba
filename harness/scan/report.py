"""Findings as text (one ``file:line:col: CODE message`` line each) or JSON."""

from __future__ import annotations

import json

from harness.scan.finding import Finding


def format_text(findings: list[Finding]) -> str:
    return "".join(f"{f.path}:{f.line}:{f.col}: {f.code.label} {f.message}\n" for f in findings)


def format_json(findings: list[Finding]) -> str:
    return json.dumps([f.as_dict() for f in findings], indent=2) + "\n"
