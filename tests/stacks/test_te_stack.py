"""The TE adapter on a real GPU: snapshot, reference agreement, and the re-introduced bug.

Every test here needs Transformer Engine and a CUDA device, and is skipped, with the reason,
where either is missing. Runs are in-process at world size 1 (no process group); the
two-rank runs are the harness's own (``python -m harness run --sut te --world-size 2``).
"""

from __future__ import annotations

import pytest
import torch

from harness.case.data import initial_weights, step_grad_output, step_inputs
from harness.runner.inproc import execute_here
from harness.stacks.protocol import BuildContext
from harness.stacks.te import availability

MISSING = availability.missing_reason()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def te_case(name: str):
    from harness.stacks.te.cases import builtin_cases

    return next(c for c in builtin_cases() if c.name == name)


@pytest.fixture
def te_stack():
    from harness.stacks.te.stack import TEStack

    stack = TEStack()
    stack.reset()
    yield stack
    stack.reset()


@pytest.fixture
def buggy_stack():
    from harness.stacks.te import id_hook
    from harness.stacks.te.stack import TEStack

    stack = TEStack(inject="id-hook")
    stack.reset()
    yield stack
    stack.reset()
    id_hook.uninstall()


def build_and_step(stack, case, model_index: int = 0):
    ctx = BuildContext(rank=0, world_size=1, group=None, device=torch.device("cpu"),
                       initial_weights=initial_weights(case, model_index, 0), deadline_s=10.0)
    model = stack.build(case.model, ctx)
    stack.forward_backward(model, step_inputs(case, model_index, 0, 0, 0), step_grad_output(case, model_index, 0, 0, 0))
    return model


def test_snapshot_has_every_role_of_every_layer_on_the_cpu(te_stack):
    case = te_case("delayed/te-default")
    model = build_and_step(te_stack, case)
    snap = te_stack.snapshot(model)
    n_layers = len(case.model.dims) - 1
    assert set(snap) == {f"layer{i}.{role}" for i in range(n_layers) for role in ("input", "weight", "grad_output")}
    for key, state in snap.items():
        assert state.amax_history.shape == (case.model.recipe.amax_history_len,), key
        assert state.scale.shape == (), key
        assert state.amax_history.device.type == "cpu" and state.scale_inv is None, key
    weight = snap["layer0.weight"]
    assert weight.fp8_bytes.dtype == torch.uint8
    assert tuple(weight.fp8_bytes.shape) == (case.model.dims[1], case.model.dims[0])
    assert weight.fp8_scale_inv.shape == ()


@pytest.mark.parametrize("name", ["delayed/te-default", "delayed/hybrid-h1-recent-m2", "delayed/hybrid-h16-max-m2",
                                  "delayed/e4m3-h16", "delayed/hp-weights-h16", "delayed/deep-narrow",
                                  "special/inf-amax", "special/nan-input", "special/tiny-amax", "special/zero-amax"])
def test_compared_fields_equal_the_reference_bit_for_bit(te_stack, name):
    case = te_case(name)
    result = execute_here(case, te_stack, reuse="off")
    assert [f for f in result.failures if f.oracle != "retention"] == []
    assert result.steps_compared == case.steps * case.models


def test_patched_stack_keeps_no_id_of_a_dead_weight(te_stack):
    result = execute_here(te_case("repro/hygiene"), te_stack)
    assert [f.detail for f in result.failures if f.oracle == "hygiene"] == []


def test_buggy_stack_keeps_dead_weight_ids(buggy_stack):
    result = execute_here(te_case("repro/hygiene"), buggy_stack)
    texts = [f.detail for f in result.failures if f.oracle == "hygiene"]
    assert any(t.startswith("id_hook.REGISTERED_FP8_PARAMS") and "weight_data" in t for t in texts), texts


def _reductions_in_optimizer_step(stack, monkeypatch) -> int:
    state_manager = stack.te_mods().state_manager
    calls = []
    original = state_manager.reduce_and_update_fp8_tensors
    model = build_and_step(stack, te_case("delayed/hybrid-h16-max-m0"))
    monkeypatch.setattr(state_manager, "reduce_and_update_fp8_tensors",
                        lambda forward=True: (calls.append(forward), original(forward=forward)))
    stack.optimizer_step(model)
    monkeypatch.undo()
    return len(calls)


def test_only_the_buggy_hook_reduces_inside_the_optimizer_step(te_stack, buggy_stack, monkeypatch):
    assert _reductions_in_optimizer_step(te_stack, monkeypatch) == 0
    assert _reductions_in_optimizer_step(buggy_stack, monkeypatch) == 1


def test_a_declined_case_says_why(te_stack):
    import dataclasses

    from harness.stacks.te.cases import DeclinedCase

    case = te_case("delayed/te-default")
    spec = dataclasses.replace(case.model, construction="init_cast")
    ctx = BuildContext(rank=0, world_size=1, group=None, device=torch.device("cpu"),
                       initial_weights=initial_weights(case, 0, 0), deadline_s=10.0)
    with pytest.raises(DeclinedCase, match="init_cast"):
        te_stack.build(spec, ctx)
