"""The tensor-parallel (Userbuffers) reference covers what each step returned, the bias included.

Known bad: ``tests/planted/tp_bias_twice.py``, a tensor-parallel layer that adds its bias twice. Its
FP8 state is right at every step; only its output is wrong, from the first step after the bias's
first update. The patched stack's outputs, input gradients and weight gradients equal the
reference's bit for bit in both layouts, with and without overlap.
"""

from __future__ import annotations

import dataclasses

import torch

from harness.case.catalog import userbuffers_cases
from harness.case.data import tp_shapes
from harness.reference.tensor_parallel import expected_tp_model
from harness.runner.config import RunConfig
from harness.runner.session import run

CASES = {c.name: c for c in userbuffers_cases()}


def _run(sut: str, names: list[str]):
    cfg = RunConfig(sut=sut, launcher="spawn", world_size=2, isolation=False, cases=[CASES[n] for n in names])
    return run(cfg)


def test_the_tp_reference_has_every_steps_output_input_gradient_and_weight_gradient():
    for name in ("userbuffers/column-bias", "userbuffers/row-frozen"):
        case = CASES[name]
        shapes = tp_shapes(case, 2)
        expected = expected_tp_model(case, 0, 2, 1, 0)
        for t in range(case.steps):
            named = expected.step_outputs(t)
            assert named["output"].shape == shapes["dy"], name
            assert named["grad_input"].shape == shapes["x"], name
            assert ("layer0.weight_grad" in named) == case.model.weight_grad, name
            if case.model.weight_grad:
                assert named["layer0.weight_grad"].shape == shapes["w"], name


def test_the_bias_enters_the_tp_reference_from_its_first_update_on():
    case = CASES["userbuffers/column-bias"]
    with_bias = expected_tp_model(case, 0, 2, 0, 0)
    without = expected_tp_model(dataclasses.replace(case, model=dataclasses.replace(case.model, bias=False)), 0, 2, 0, 0)
    # zeros at construction: the first step's output is the GEMM alone
    assert torch.equal(with_bias.outputs[0], without.outputs[0])
    assert not torch.equal(with_bias.outputs[1], without.outputs[1])


def test_a_tp_layer_that_adds_its_bias_twice_fails_the_reference_on_its_output():
    report = _run("tests.planted.tp_bias_twice:STACK", ["userbuffers/column-bias", "userbuffers/row-bias"])
    for case in report.cases:
        assert case.outcome == "failed" and case.oracle == "reference", (case.name, case.detail)
        line = case.detail.splitlines()[0]
        # the first step after the bias's first update; the first element, both values, both bit patterns
        assert line.startswith("[reference] rank 0, model 0, step 1: output[0, 0]: expected "), line
        assert line.count("(0x") == 2 and "element(s) differ" in line, line


def test_the_patched_tp_layer_returns_what_the_reference_computes_bit_for_bit():
    names = ["userbuffers/column-bias", "userbuffers/row-bias-frozen", "userbuffers/column-no-overlap"]
    report = _run("emulated-patched", names)
    assert [c.outcome for c in report.cases] == ["passed"] * 3, [c.detail for c in report.cases]
    assert all(c.steps_compared > 0 for c in report.cases)
