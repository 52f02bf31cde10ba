"""Registries of one call and ids taken at import (harness/scan/transient.py,
harness/scan/importtime.py), each low case beside a high one that differs from it in the one
respect the rule reads.

Reproduce: python -m harness scan --all --hazards-only tests/scan/handed_once
"""

from __future__ import annotations

import pathlib

import pytest

from harness.scan.finding import Confidence, Severity
from harness.scan.scanner import scan_paths

FIXTURE = pathlib.Path(__file__).parent / "handed_once"

# registry -> (confidence, a word its reason must contain)
EXPECTED = {
    # a nested function handed to a walk whose result is dropped, or kept in a local
    "found in paths_by_id()": (Confidence.LOW, "handed only to calls"),
    "parents in parents_by_id()": (Confidence.LOW, "handed only to calls"),
    # the same handed to a call that says it keeps it, or whose result is returned: kept, but
    # not as a memo of its callers' arguments (low for that reason, not for one call)
    "installed in paths_installed()": (Confidence.LOW, "installed or kept, but not as a memo"),
    "returned in paths_returned()": (Confidence.LOW, "installed or kept, but not as a memo"),
    # ids taken in the module body of what the module or an imported one holds
    "_BUILTIN_IDS": (Confidence.LOW, "module body"),
    "_TYPE_IDS": (Confidence.LOW, "module body"),
    # ids of what a call makes there
    "_MADE_IDS": (Confidence.HIGH, "whole process"),
}


@pytest.fixture(scope="module")
def hazards():
    result = scan_paths([str(FIXTURE)])
    return {f.name: f for f in result.registries if f.severity is Severity.HAZARD}


def test_every_hazard_of_the_fixture_is_expected(hazards):
    assert sorted(hazards) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_confidence_and_its_reason(hazards, name):
    confidence, word = EXPECTED[name]
    finding = hazards[name]
    assert finding.confidence is confidence, f"{name}: {finding.confidence_reason}"
    assert word in finding.confidence_reason, f"{name}: {finding.confidence_reason}"


_TEST_MODULE = '''
import unittest

SEEN = {}


def record(node):
    if id(node) not in SEEN:
        SEEN[id(node)] = node.name


class RecordTest(unittest.TestCase):
    def test_ids_are_kept(self):
        record(self)
        self.assertTrue(SEEN)
'''


@pytest.mark.parametrize("name, confidence", [("test_records.py", Confidence.LOW), ("records_test.py", Confidence.LOW),
                                              ("records.py", Confidence.HIGH)])
def test_a_registry_only_in_a_test_module_is_low(tmp_path, name, confidence):
    # the same module-level registry: low in a module test runners collect, high in any other
    (tmp_path / name).write_text(_TEST_MODULE)
    result = scan_paths([str(tmp_path)])
    (finding,) = [f for f in result.registries if f.severity is Severity.HAZARD]
    assert finding.confidence is confidence, finding.confidence_reason
    assert (confidence is Confidence.HIGH) or "test module" in finding.confidence_reason
