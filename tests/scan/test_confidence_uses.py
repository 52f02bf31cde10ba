"""How sure the scan is of each hazard, for the rules that read how an entry is used or how
long its container lasts (harness/scan/blockvars.py, ...): each low-confidence registry of
the fixture has a high-confidence contrast that differs in the one respect its rule reads.

Reproduce: python -m harness scan --all --hazards-only tests/scan/fixtures/confidence_uses.py
"""

from __future__ import annotations

import pathlib

import pytest

from harness.scan.finding import Confidence
from harness.scan.finding import Severity
from harness.scan.scanner import scan_paths

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "confidence_uses.py"
REPRODUCE = f"python -m harness scan --all --hazards-only {FIXTURE}"

# registry -> (confidence, a word its reason must contain); pairs differ in one respect.
EXPECTED = {
    "REPR_CONTEXT.seen": (Confidence.LOW, "emptied in a finally"),
    "REPR_CONTEXT.stats": (Confidence.HIGH, "whole process"),
    "Graph.nodes": (Confidence.LOW, "one phase"),
    "table in Graph.hook_table()": (Confidence.HIGH, "installed or kept"),
    "source_lines": (Confidence.LOW, "traceback"),
    "_OWN_SOURCES": (Confidence.HIGH, "whole process"),
    "Pool._acquired": (Confidence.LOW, "is_debug (default False)"),
    "Pool._traced": (Confidence.HIGH, "module-level instance"),
    "_WARNED": (Confidence.LOW, "warning"),
    "_PATCHED": (Confidence.HIGH, "whole process"),
    "_local.torch['loss_mapping'] (thread-local)": (Confidence.HIGH, "thread-local storage"),
    "run._plain.torch['loss_mapping'] in map_plain()": (Confidence.LOW, "caller's"),
    "Patches._helpers": (Confidence.LOW, "what a new one would be"),
    "Patches._unchecked": (Confidence.HIGH, "whole process"),
    "REPR_CONTEXT.stats_once": (Confidence.LOW, "emptied in a finally"),
    "REPR_CONTEXT.stats_kept": (Confidence.HIGH, "another object"),
}


@pytest.fixture(scope="module")
def hazards():
    result = scan_paths([str(FIXTURE)])
    return {f.name: f for f in result.registries if f.severity is Severity.HAZARD}


def test_every_hazard_of_the_fixture_is_expected(hazards):
    assert sorted(hazards) == sorted(EXPECTED), REPRODUCE


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_confidence_and_its_reason(hazards, name):
    confidence, word = EXPECTED[name]
    finding = hazards[name]
    assert finding.confidence is confidence, f"{name}: {finding.confidence_reason}\nreproduce: {REPRODUCE}"
    assert word in finding.confidence_reason, f"{name}: {finding.confidence_reason}\nreproduce: {REPRODUCE}"
