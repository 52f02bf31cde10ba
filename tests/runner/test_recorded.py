"""The reference checked by the judge: ranks record, the controller simulates once and compares.

Known bad inputs: a record with one flipped byte (the finding names model, step, index, both
values and both bit patterns, as a rank's own comparison does) and records a judge is handed
without the case's expectation (refused, never passed).
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from harness.case.catalog import builtin_cases
from harness.oracles.recorded import CaseExpectation, Records, StepRecorder, check_recorded
from harness.reference import expected_model, expected_models
from harness.runner.judge import GroupOutcome, judge
from harness.runner.rank.result import RankResult

CASES = {c.name: c for c in builtin_cases(world_size=2)}


def same_bits(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                    b.reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("name", ["delayed/wide", "repro/cross-rank", "special/nan-input", "userbuffers/row-bias"])
def test_one_simulation_of_the_group_gives_each_ranks_own_reference_bit_for_bit(name):
    case = CASES[name]
    for m in range(min(case.models, 2)):
        together = expected_models(case, 3, 2, m)
        for r in range(2):
            alone = expected_model(case, 3, 2, r, m)
            for t in range(case.steps):
                for key, st in alone.steps[t].items():
                    for field in ("amax_history", "scale", "scale_inv", "fp8_bytes", "fp8_scale_inv"):
                        assert same_bits(getattr(st, field), getattr(together[r].steps[t][key], field)), (key, field)
                for key, tensor in alone.step_outputs(t).items():
                    assert same_bits(tensor, together[r].step_outputs(t)[key]), key


def recorded_result(case, rank: int, expectation: CaseExpectation) -> RankResult:
    """A rank result whose records are the reference's own (what a correct stack records)."""
    return RankResult(case=case.name, rank=rank, states=expectation.records(rank))


def test_records_round_trip_every_tensor_with_its_dtype_and_shape():
    rec = StepRecorder()
    fp8 = torch.tensor([1, 2, 255], dtype=torch.uint8).view(torch.float8_e4m3fn)
    state = type("S", (), {"amax_history": torch.arange(6.0).reshape(3, 2), "scale": torch.tensor(2.0),
                           "scale_inv": torch.tensor(0.5), "fp8_bytes": fp8.view(torch.uint8), "fp8_scale_inv": None})
    rec.step(1, 0, {"layer0.input": state}, {"output": torch.tensor([[-0.0, 1.5]])})
    records = Records(rec.to_dict())
    got = records.steps[(1, 0)]
    assert same_bits(got["s"]["layer0.input"].amax_history, state.amax_history)
    assert same_bits(got["s"]["layer0.input"].scale, state.scale)
    assert got["s"]["layer0.input"].fp8_scale_inv is None
    assert same_bits(got["o"]["output"], torch.tensor([[-0.0, 1.5]]))     # -0.0 keeps its sign bit


def test_the_judge_passes_records_equal_to_the_reference_and_counts_their_steps():
    case = CASES["repro/cross-rank"]
    expectation = CaseExpectation(case, 0, 2)
    results = {r: recorded_result(case, r, expectation) for r in range(2)}
    assert judge(case, GroupOutcome(results, []), None, 2, expectation) == []
    assert [results[r].steps_compared for r in range(2)] == [case.models * case.steps] * 2


def test_the_judge_names_the_first_flipped_byte_of_one_ranks_records():
    case = CASES["repro/cross-rank"]
    expectation = CaseExpectation(case, 0, 2)
    good = recorded_result(case, 0, expectation)
    bad = recorded_result(case, 1, expectation)
    layout = bad.states["layout"]
    # the first fp8_bytes tensor of step 1 of model 0: where it starts in the packed data
    offset = 0
    for model, step, kind, name, dtype, shape in layout:
        n = int(torch.tensor(shape).prod().item()) if shape else 1
        size = n * getattr(torch, dtype.split(".")[1]).itemsize
        if (model, step, kind) == (0, 1, "s") and name.endswith("|fp8_bytes"):
            target = name.split("|")[0]
            break
        offset += size
    data = bytearray(bad.states["data"])
    before = data[offset + 3]
    data[offset + 3] ^= 0x01
    # what a rank that holds the flipped byte sends: its bytes and their digest
    bad.states = {"layout": layout, "data": bytes(data),
                  "digest": hashlib.sha1(bytes(data)).hexdigest()}
    failures = judge(case, GroupOutcome({0: good, 1: bad}, []), None, 2, expectation)
    [failure] = [f for f in failures if f.oracle == "reference"]
    assert (failure.rank, failure.model, failure.step) == (1, 0, 1)
    assert failure.detail.startswith(f"{target}.fp8_bytes[0, 3]: expected {before} (0x{before:02x}), "
                                     f"got {before ^ 1} (0x{before ^ 1:02x})")


def test_records_that_do_not_parse_are_a_finding_not_a_pass():
    case = CASES["repro/cross-rank"]
    expectation = CaseExpectation(case, 0, 2)
    result = recorded_result(case, 0, expectation)
    result.states = {"layout": result.states["layout"], "data": b""}     # the bytes are missing
    check_recorded(result, expectation)
    [failure] = result.failures
    assert failure.oracle == "error" and "cannot be read" in failure.detail


def test_records_without_an_expectation_are_refused_not_passed():
    case = CASES["repro/cross-rank"]
    results = {r: recorded_result(case, r, CaseExpectation(case, 0, 2)) for r in range(2)}
    with pytest.raises(ValueError, match="recorded their FP8 state"):
        judge(case, GroupOutcome(results, []), None, 2)


def test_a_result_without_records_is_left_as_the_rank_judged_it():
    case = CASES["repro/cross-rank"]
    result = RankResult(case=case.name, rank=0, steps_compared=4)
    check_recorded(result, CaseExpectation(case, 0, 2))
    assert result.failures == [] and result.steps_compared == 4


def sha1_per_tensor(layout, data: bytes) -> list[bytes]:
    """Each recorded tensor's SHA-1, cut from the packed bytes by the layout."""
    out, offset = [], 0
    for _model, _step, _kind, _name, dtype, shape in layout:
        n = int(torch.tensor(shape).prod().item()) if shape else 1
        size = n * getattr(torch, dtype.split(".")[1]).itemsize
        out.append(hashlib.sha1(data[offset:offset + size]).digest())
        offset += size
    assert offset == len(data)
    return out


def test_the_digest_the_judge_matches_is_over_exactly_the_bytes_a_rank_sends():
    case = CASES["delayed/wide"]
    expectation = CaseExpectation(case, 0, 2)
    for r in range(2):
        full = expectation.records(r)
        # each tensor hashed once; the records' digest is a SHA-1 of those SHA-1s, in layout order
        per_tensor = sha1_per_tensor(full["layout"], full["data"])
        assert hashlib.sha1(b"".join(per_tensor)).hexdigest() == full["digest"]
        # the report's token of a tensor: its bits when it has one element, else its SHA-1's start
        one_element = [int(torch.tensor(row[5]).prod().item()) == 1 for row in full["layout"]]
        assert [t.startswith("=") for t in full["tokens"]] == one_element
        assert [t for t, one in zip(full["tokens"], one_element) if not one] == \
            [d.hex()[:12] for d, one in zip(per_tensor, one_element) if not one]
        assert expectation.digest(r) == {"layout": full["layout"], "digest": full["digest"], "tokens": full["tokens"]}


def test_records_without_a_digest_are_compared_element_by_element():
    case = CASES["repro/cross-rank"]
    expectation = CaseExpectation(case, 0, 2)
    result = recorded_result(case, 0, expectation)
    del result.states["digest"]
    check_recorded(result, expectation)
    assert result.failures == [] and result.steps_compared == case.models * case.steps
