"""Confidence rules read from the shapes of the blind census, each beside a contrast.

An id of the last argument kept on a long-lived object and compared on the next call
(harness/scan/lastarg.py): high confidence, beside the same shape whose kept id a per-step
method clears (low), on tests/scan/fixtures/last_argument.py. The key bound in one branch of an
``if`` and something else in the ``else`` is still followed to the attribute it is kept in.
Source registered in ``linecache.cache`` under an id-made name: low, beside the same name
keying a registry the code reads back: high (tests/scan/fixtures/traceback_sources.py).

Reproduce: python -m harness scan --all --hazards-only tests/scan/fixtures/last_argument.py
"""

from __future__ import annotations

import pathlib

import pytest

from harness.scan.finding import Confidence, Severity
from harness.scan.scanner import scan_paths

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "last_argument.py"
REPRODUCE = f"python -m harness scan --all --hazards-only {FIXTURE}"

EXPECTED = {
    "Backend._batch_id": Confidence.HIGH,
    "Backend._step_id": Confidence.LOW,
    "Backend._table": Confidence.HIGH,
    "backend.rebuilt_id in rebuild()": Confidence.HIGH,
    "MaskMeta._key": Confidence.HIGH,
}


@pytest.fixture(scope="module")
def hazards():
    result = scan_paths([str(FIXTURE)])
    return {f.name: f for f in result.registries if f.severity is Severity.HAZARD}


def test_every_hazard_of_the_fixture_is_expected(hazards):
    assert sorted(hazards) == sorted(EXPECTED), REPRODUCE


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_confidence(hazards, name):
    finding = hazards[name]
    assert finding.confidence is EXPECTED[name], f"{name}: {finding.confidence_reason}\nreproduce: {REPRODUCE}"
    if finding.confidence is Confidence.HIGH:
        assert "argument of one call" in finding.confidence_reason, finding.confidence_reason


def test_source_kept_for_tracebacks_is_low_and_a_registry_read_back_high():
    fixture = FIXTURE.parent / "traceback_sources.py"
    result = scan_paths([str(fixture)])
    found = {f.name: f for f in result.registries if f.severity is Severity.HAZARD}
    assert found["linecache.cache"].confidence is Confidence.LOW, found["linecache.cache"].confidence_reason
    assert "traceback" in found["linecache.cache"].confidence_reason
    assert found["_SOURCES"].confidence is Confidence.HIGH, found["_SOURCES"].confidence_reason
