"""One finding per registry: a store and its read in two files, reached through a module
import and through a name imported from it, are uses of one registry, judged together and
reported once, at one confidence.

Reproduce: python -m harness scan --all tests/scan/split_registry
"""

from __future__ import annotations

import pathlib

from harness.scan.finding import Confidence, Severity
from harness.scan.scanner import scan_paths

TREE = pathlib.Path(__file__).parent / "split_registry"


def test_a_store_and_its_read_in_two_files_are_one_finding():
    result = scan_paths([str(TREE)])
    assert len(result.registries) == 1, [(f.name, f.severity, f.confidence) for f in result.registries]
    finding = result.registries[0]
    assert finding.severity is Severity.HAZARD and finding.confidence is Confidence.HIGH
    uses = sorted((pathlib.Path(use.path).name, use.line, use.role) for use in finding.uses)
    assert uses == [("state.py", 7, "read"), ("user.py", 8, "store"), ("user.py", 12, "store")]
