"""The isolation oracle's account of the run alone, on results made by hand.

Known bad: a run alone with a reference finding, whose digest differs from the shared run's (the
line must name the run that disagrees with the reference); a run alone stopped by a buffer it read
(its finding is the case's, and the runs are not compared). The end-to-end counterparts, with
planted stacks, are in ``tests/test_isolated_checks.py``.
"""

from __future__ import annotations

import json

from harness.oracles.findings import Failure
from harness.oracles.isolation import alone_findings, compare_runs
from harness.runner.rank.result import RankResult
from harness.runner.rank.zygote import records_as_bytes, records_as_text

OUTPUT_OFF = "output[0, 0]: expected -1.0 (0xbf800000), got -2.0 (0xc0000000); 3 element(s) differ"


def _result(digest: str, *failures, steps_compared: int = 6) -> RankResult:
    return RankResult(case="probe", rank=0, digest=digest, failures=list(failures), steps_compared=steps_compared)


def test_a_digest_difference_names_the_run_that_disagrees_with_the_reference():
    wrong = Failure("reference", OUTPUT_OFF, rank=0, step=1, model=0)
    [line] = compare_runs(_result("a" * 32), _result("b" * 32, wrong))
    assert line.startswith(f"result digest {'a' * 16} after other cases differs from {'b' * 16} alone: ")
    assert line.endswith("the run after other cases agrees with the reference (6 steps compared); the run alone "
                         f"disagrees with the reference ([reference] rank 0, model 0, step 1: {OUTPUT_OFF})")
    [line] = compare_runs(_result("b" * 32, wrong), _result("a" * 32))
    assert line.endswith(f"the run after other cases disagrees with the reference ([reference] rank 0, model 0, "
                         f"step 1: {OUTPUT_OFF}); the run alone agrees with the reference (6 steps compared)")


def test_the_run_alones_buffer_integrity_and_reference_findings_are_findings_of_the_case():
    alone = _result("a" * 32,
                    Failure("buffer-integrity", "BufferIntegrityError: userbuffers 'qkv' ...: chunk 1", rank=1),
                    Failure("reference", OUTPUT_OFF, rank=1, step=1, model=0),
                    Failure("hygiene", "registry r holds id 0x10 of dead w", rank=1, model=0))
    found = alone_findings(alone)
    assert [(f.oracle, f.rank, f.model, f.step) for f in found] == [("buffer-integrity", 1, None, None),
                                                                    ("reference", 1, 0, 1)]
    assert all(f.detail.startswith("in the run alone (this case only, in a fresh process): ") for f in found)
    # a run alone that stopped on a buffer it read is not compared with the shared run
    [line] = compare_runs(_result("b" * 32), alone)
    assert line == ("the isolated run of this case failed by itself (buffer-integrity, reported on its own line), "
                    "so it cannot be compared")


def test_the_run_alones_records_cross_the_zygotes_pipe_unchanged():
    raw = bytes(range(256)) * 3
    answer = {"ok": records_as_text({"case": "c", "states": {"layout": [[0, 0, "o", "x", "torch.uint8", [768]]],
                                                             "digest": "d", "data": raw}})}
    back = records_as_bytes(json.loads(json.dumps(answer)))
    assert back["ok"]["states"]["data"] == raw and back["ok"]["states"]["digest"] == "d"
