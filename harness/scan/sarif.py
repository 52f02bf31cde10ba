"""Findings as SARIF 2.1.0, the form GitHub code scanning uploads.

One result per registry: ``ruleId`` is the finding code (the rules are listed in the
driver), the location is the registry's first use with a ``uri`` relative to the base
directory and ``uriBaseId`` ``SRCROOT``; the other uses are ``relatedLocations``;
``partialFingerprints`` (:mod:`harness.scan.fingerprint`) keeps a finding's identity across
commits. ``level``: ``error`` for a hazard of high confidence and for files that could not be
checked, ``warning`` for a hazard of low confidence, ``note`` for a safe finding. Called by
:func:`harness.scan.cli.main` for ``--format sarif``.
"""

from __future__ import annotations

import json
import os
import pathlib
import urllib.parse

from harness import __version__
from harness.scan.codes import Code
from harness.scan.finding import Confidence
from harness.scan.finding import Finding, RegistryFinding, Severity
from harness.scan.fingerprint import KEY, fingerprint, relative_uri

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
BASE_ID = "SRCROOT"


def _rules() -> list[dict]:
    return [
        {
            "id": code.label,
            "name": "".join(word.capitalize() for word in code.name.split("_")),
            "shortDescription": {"text": code.title},
            "defaultConfiguration": {"level": "error"},
        }
        for code in Code
    ]


def _level(finding: RegistryFinding) -> str:
    if finding.severity is Severity.SAFE:
        return "note"
    if finding.severity is Severity.HAZARD and finding.name and finding.confidence is Confidence.LOW:
        return "warning"
    return "error"


def _location(use: Finding, base: str) -> dict:
    uri = relative_uri(use.path, base)
    if os.path.isabs(uri):
        artifact = {"uri": pathlib.Path(uri).as_uri()}       # outside the base: an absolute file URI
    else:
        artifact = {"uri": urllib.parse.quote(uri), "uriBaseId": BASE_ID}
    region = {"startLine": use.line, "startColumn": use.col}
    if use.snippet:
        region["snippet"] = {"text": use.snippet}
    return {"physicalLocation": {"artifactLocation": artifact, "region": region}}


def _message(finding: RegistryFinding) -> str:
    if not finding.name:
        return finding.first.detail
    lines = [f"{finding.code.title}: {finding.name} ({finding.label})."]
    if finding.severity is Severity.HAZARD:
        lines += [f"Why: {finding.why}", f"Confidence: {finding.confidence_reason}", f"Fix: {finding.fix}"]
    else:
        lines.append(f"Safe: {finding.why}")
    return "\n".join(lines)


def format_sarif(findings: list[RegistryFinding], base: str) -> str:
    codes = list(Code)
    results = []
    for finding in findings:
        first = finding.first
        result = {
            "ruleId": first.code.label,
            "ruleIndex": codes.index(first.code),
            "level": _level(finding),
            "message": {"text": _message(finding)},
            "locations": [_location(first, base)],
            "partialFingerprints": {KEY: fingerprint(finding, base)},
            "properties": {"severity": finding.severity.value},
        }
        if finding.name:
            result["properties"]["registry"] = finding.name
            if finding.severity is Severity.HAZARD:
                result["properties"]["confidence"] = finding.confidence.value
        related = [
            dict(_location(use, base), id=index, message={"text": f"{use.role}: {use.subject}"})
            for index, use in enumerate(finding.uses[1:], start=1)
        ]
        if related:
            result["relatedLocations"] = related
        results.append(result)
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "fp8-harness-id-scan",
                "version": __version__,
                "rules": _rules(),
            }},
            "originalUriBaseIds": {BASE_ID: {"uri": pathlib.Path(os.path.abspath(base)).as_uri().rstrip("/") + "/"}},
            "results": results,
        }],
    }
    return json.dumps(log, indent=2) + "\n"
