"""Userbuffers counters that wrap after many operations, on spawned ranks.

Known bad: ``tests/planted/ub_counter_wraps.py`` keeps each communicator's release counter
modulo 64, 128 or 256 operations. The Userbuffers cases alone take a communicator through a few
dozen operations; the long-process case of the default run takes one through at least 512, so
the plain run meets the wrap whatever its width, and the printed repro (the long case, which
replays the operations the failure needed) fails the same way in a fresh process.
"""

from __future__ import annotations

import pytest

from tests.planted.runs import plain_selection, run_repro

WRAPS = {64: "WRAPS_AT_64", 128: "WRAPS_AT_128", 256: "WRAPS_AT_256"}


def _run(sut: str):
    return plain_selection(sut, "userbuffers", deadline_s=3.0)


def _wrapped(report, wrap: int):
    failed = [c for c in report.cases if c.outcome == "failed"]
    assert failed, [(c.name, c.outcome) for c in report.cases]
    hits = [c for c in failed if f"after operation #{wrap - 1} (counter 0, expected {wrap})" in c.detail]
    assert hits, [(c.name, c.oracle, c.detail[:400]) for c in failed]
    return hits[0]


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_counter_that_wraps_is_met_by_the_plain_run(wrap):
    _wrapped(_run(f"tests.planted.ub_counter_wraps:{WRAPS[wrap]}"), wrap)


def test_the_wrapping_counters_repro_fails_in_a_fresh_process(tmp_path):
    case = _wrapped(_run("tests.planted.ub_counter_wraps:WRAPS_AT_256"), 256)
    again, ran = run_repro(case.repro, tmp_path / "repro.json")
    assert again.returncode == 1, again.stdout + again.stderr
    assert ran["outcome"] == "failed" and "(counter 0, expected 256)" in ran["detail"], ran


def test_the_patched_stack_passes_the_long_cases():
    report = _run("emulated-patched")
    assert all(c.outcome == "passed" for c in report.cases), [(c.name, c.detail[:300]) for c in report.cases]
