"""The reference oracle compares what each step computed: output, input gradient, weight gradients.

Known bad: a one-layer model whose GEMM dequantizes the weight with a stale scale_inv
(``tests/planted/stale_scale_inv.py``). Its FP8 state is right at every step, so the snapshot
comparison alone passes it (shown by a wrapper that returns nothing from ``forward_backward``,
which is what the harness looked at before outputs were compared); the output comparison fails it.
"""

from __future__ import annotations

import pytest
import torch

from harness.case.catalog import builtin_cases
from harness.oracles.reference import compare_outputs
from harness.runner.inproc import execute_here
from harness.stacks import load_stack
from harness.stacks.protocol import StepOutputs
from tests.planted.stale_scale_inv import StaleScaleInvStack

CASES = {c.name: c for c in builtin_cases()}


@pytest.fixture(autouse=True)
def fresh_registries():
    stack = load_stack("emulated-patched")
    stack.reset()
    yield
    stack.reset()


class Returns(StaleScaleInvStack):
    """The planted stack, returning only part of what it computed (``what``: "nothing" or "output")."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def forward_backward(self, model, inputs, grad_output):
        returned = super().forward_backward(model, inputs, grad_output)
        return None if self.what == "nothing" else returned.output


def run(case_name: str, stack, judged: bool = False):
    return execute_here(CASES[case_name], stack, judged=judged)


JUDGED = pytest.mark.parametrize("judged", [False, True], ids=["on the rank", "by the judge"])


@pytest.mark.parametrize("case_name", ["delayed/wide", "repro/cross-rank"])
@JUDGED
def test_a_stale_scale_inv_in_a_one_layer_gemm_passes_without_the_output_comparison(case_name, judged):
    result = run(case_name, Returns("nothing"), judged=judged)
    assert result.failures == [] and result.steps_compared > 0


@pytest.mark.parametrize("case_name", ["delayed/wide", "repro/cross-rank"])
@JUDGED
def test_a_stale_scale_inv_in_a_one_layer_gemm_is_caught_by_the_output_comparison(case_name, judged):
    result = run(case_name, StaleScaleInvStack(), judged=judged)
    [failure] = result.failures
    assert failure.oracle == "reference" and (failure.model, failure.step) == (0, 1)
    # index, both values, both bit patterns, and how many elements differ
    assert failure.detail.startswith("output[0, 0]: expected ")
    assert failure.detail.count("(0x") == 2 and "element(s) differ" in failure.detail


@JUDGED
def test_a_stack_that_returns_the_output_alone_has_its_output_compared(judged):
    result = run("delayed/wide", Returns("output"), judged=judged)
    assert [f.detail.split(":")[0] for f in result.failures] == ["output[0, 0]"]


def test_the_patched_stack_returns_outputs_and_gradients_equal_to_the_reference():
    stack = load_stack("emulated-patched")
    case = CASES["delayed/deep-narrow"]
    from harness.case.data import initial_weights, step_grad_output, step_inputs
    from harness.reference import expected_model
    from harness.stacks.protocol import BuildContext

    ctx = BuildContext(rank=0, world_size=1, group=None, device=torch.device("cpu"),
                       initial_weights=initial_weights(case, 0, 0), deadline_s=10.0)
    model = stack.build(case.model, ctx)
    expected = expected_model(case, 0, 1, 0, 0)
    for t in range(case.steps):
        returned = StepOutputs.of(stack.forward_backward(model, step_inputs(case, 0, t, 0, 0),
                                                         step_grad_output(case, 0, t, 0, 0))).named()
        assert sorted(returned) == sorted(expected.step_outputs(t)) == \
            ["grad_input", "layer0.weight_grad", "layer1.weight_grad", "layer2.weight_grad",
             "layer3.weight_grad", "output"]
        assert compare_outputs(expected.step_outputs(t), returned) is None
        stack.optimizer_step(model)
    stack.destroy(model)


def test_compare_outputs_names_the_first_differing_element_with_values_and_bits():
    expected = {"output": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "grad_input": torch.zeros(2),
                "layer0.weight_grad": torch.ones(2)}
    grad = torch.zeros(2)
    grad[1] = -0.0
    assert compare_outputs(expected, {"output": expected["output"].clone()}) is None
    text = compare_outputs(expected, {"output": expected["output"].clone(), "grad_input": grad})
    assert text == ("grad_input[1]: expected 0.0 (0x00000000), got -0.0 (0x80000000); 1 element(s) differ")
    off = expected["output"].clone()
    off[1, 0] = torch.nextafter(off[1, 0], torch.tensor(10.0))
    text = compare_outputs(expected, {"output": off, "layer0.weight_grad": torch.zeros(2)})
    assert text == "output[1, 0]: expected 3.0 (0x40400000), got 3.000000238418579 (0x40400001); 1 element(s) differ"
    # names the reference does not give are not compared; neither are names the stack does not return
    assert compare_outputs({}, {"output": off}) is None
    assert compare_outputs({"output": off}, {}) is None


def test_step_outputs_accepts_the_output_alone_or_nothing_and_refuses_anything_else():
    out = torch.ones(2)
    assert StepOutputs.of(out).named() == {"output": out}
    assert StepOutputs.of(None).named() == {}
    with pytest.raises(TypeError, match="forward_backward returned a tuple"):
        StepOutputs.of((out, out))
