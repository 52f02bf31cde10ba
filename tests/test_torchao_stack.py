"""The torchao adapter (``--sut torchao``) and its reference: casts read right, compared bit for bit.

Each test drives the stack the way the harness does (build, forward_backward, snapshot,
optimizer_step) on a small case, and compares with :func:`harness.stacks.torchao.reference.expected_model`.
Skipped where torchao cannot be imported, except the error a missing torchao gives.
"""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from harness.case.data import initial_weights, step_grad_output, step_inputs
from harness.case.spec import CaseSpec
from harness.errors import SetupError, UsageError
from harness.fp8.recipe import DelayedScalingRecipe
from harness.oracles.reference import FINAL_FIELDS, compare_states
from harness.stacks.protocol import BuildContext, ModelSpec
from harness.stacks.torchao import id_hook
from harness.stacks.torchao.reference import expected_model

ROLES = ("input", "weight", "grad_output")
REPEATS = {"weight_for_grad_input": "weight", "grad_output_for_grad_weight": "grad_output",
           "input_for_grad_weight": "input"}


def _torchao_available() -> bool:
    try:
        import torchao.float8  # noqa: F401
    except Exception:
        return False
    return True


needs_torchao = pytest.mark.skipif(not _torchao_available(), reason="torchao is not installed (pip install -e '.[torchao]')")


@pytest.fixture(scope="module")
def stack():
    from harness.stacks.torchao.stack import load

    torch.set_num_threads(1)
    return load()


def _case(name="unit", *, scaling="tensorwise", dims=(16, 24, 8), steps=3, special="none", batch=6,
          construction="copy", data_parallel=True, models=1):
    model = ModelSpec(dims=dims, recipe=DelayedScalingRecipe(reduce_amax=False), fp8_params=False,
                      construction=construction, data_parallel=data_parallel, scaling=scaling)
    return CaseSpec(name=name, model=model, batch=batch, steps=steps, models=models, special=special)


def _run(stack, case, model_index=0, seed=0):
    """Run one model of ``case`` on one rank; return (snapshots per step, final weights, model)."""
    ctx = BuildContext(rank=0, world_size=1, group=None, device=torch.device("cpu"),
                       initial_weights=initial_weights(case, model_index, seed), deadline_s=10.0)
    model = stack.build(case.model, ctx)
    snaps = []
    for t in range(case.steps):
        stack.forward_backward(model, step_inputs(case, model_index, t, 0, seed),
                               step_grad_output(case, model_index, t, 0, seed))
        snaps.append(stack.snapshot(model))
        stack.optimizer_step(model)
    return snaps, stack.final_weights(model), model


# --------------------------------------------------------------------------- loading


def test_missing_torchao_is_a_setup_error(monkeypatch):
    from harness.stacks.torchao.stack import load

    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    with pytest.raises(SetupError, match=r"--sut torchao needs torchao: pip install -e '\.\[torchao\]'"):
        load()


def test_missing_torchao_exits_2_with_one_line(monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    assert main(["run", "--sut", "torchao", "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs torchao" in err[0]


@needs_torchao
def test_names_and_unknown_injection():
    from harness.stacks import load_stack

    assert load_stack("torchao").name == "torchao"
    assert load_stack("torchao", {"inject": "id-hook"}).name == "torchao+id-hook"
    with pytest.raises(UsageError, match="id-hook"):
        load_stack("torchao", {"inject": "nonsense"})


@needs_torchao
def test_catalogue_has_cases_of_every_kind(stack):
    cases = stack.builtin_cases()
    names = [c.name for c in cases]
    assert len(cases) >= 8 and len(set(names)) == len(names)
    assert all(n.startswith("torchao/") for n in names)
    assert {"zero", "huge", "tiny", "inf", "nan"} <= {c.special for c in cases}
    assert all(c.models >= 2 for c in cases if c.name.startswith("torchao/tensorwise-"))
    assert not any(c.model.recipe.reduce_amax for c in cases)   # torchao reduces no amaxes


@needs_torchao
def test_unsupported_scaling_is_refused(stack):
    case = _case(scaling="delayed")
    ctx = BuildContext(0, 1, None, torch.device("cpu"), initial_weights(case, 0, 0), 10.0)
    with pytest.raises(ValueError, match="tensorwise"):
        stack.build(case.model, ctx)


# --------------------------------------------------------------------------- casts and reference


@needs_torchao
@pytest.mark.parametrize("special", ["none", "zero", "tiny", "huge", "inf", "nan"])
def test_every_cast_matches_the_reference_bitwise(stack, special):
    case = _case(special=special)
    snaps, final, _ = _run(stack, case)
    expected = expected_model(case, 0, 1, 0, 0)
    for t, snap in enumerate(snaps):
        assert set(snap) == set(expected.steps[t])
        assert len(snap) == 6 * 2      # six casts per layer, two layers
        assert compare_states(expected.steps[t], snap) is None, f"step {t}"
    assert compare_states(expected.final, final, FINAL_FIELDS) is None


@needs_torchao
@pytest.mark.parametrize("scaling", ["rowwise", "rowwise_with_gw_hp"])
def test_other_recipes_match_the_reference_bitwise(stack, scaling):
    case = _case(scaling=scaling, special="tiny")
    snaps, final, _ = _run(stack, case)
    expected = expected_model(case, 0, 1, 0, 0)
    for t, snap in enumerate(snaps):
        assert compare_states(expected.steps[t], snap) is None, f"step {t}"
    assert compare_states(expected.final, final, FINAL_FIELDS) is None
    if scaling == "rowwise_with_gw_hp":   # grad_weight is high precision: casts 5 and 6 do not happen
        assert not any(k.endswith(("grad_output_for_grad_weight", "input_for_grad_weight")) for k in snaps[0])


@needs_torchao
def test_tensorwise_repeats_are_the_first_casts_byte_for_byte(stack):
    snaps, _, _ = _run(stack, _case(steps=2))
    for snap in snaps:
        for layer in range(2):
            for repeat, first in REPEATS.items():
                a, b = snap[f"layer{layer}.{repeat}"], snap[f"layer{layer}.{first}"]
                assert torch.equal(a.fp8_bytes, b.fp8_bytes) and torch.equal(a.scale, b.scale)


@needs_torchao
def test_a_repeat_that_differs_fails_the_reference(stack):
    case = _case(steps=1)
    snaps, _, _ = _run(stack, case)
    snap = snaps[0]
    snap["layer1.weight_for_grad_input"].fp8_bytes[0, 0] ^= 1
    mismatch = compare_states(expected_model(case, 0, 1, 0, 0).steps[0], snap)
    assert mismatch is not None and mismatch.startswith("layer1.weight_for_grad_input.fp8_bytes")


@needs_torchao
def test_role_state_layout_and_hand_worked_values(stack):
    case = _case(special="zero", steps=2)
    snaps, _, model = _run(stack, case)
    snap = snaps[1]                 # step 1: every input element is zero
    x = snap["layer0.input"]
    assert x.amax_history.shape == (1,) and x.amax_history.item() == 0.0
    # amax 0 is clamped to 1e-12 in float64: scale float32(448e12), bits 0x57CBBA10
    assert x.scale.dtype == torch.float32 and x.scale.view(torch.int32).item() == 0x57CBBA10
    assert torch.equal(x.scale_inv, torch.ones(()) / x.scale)
    assert torch.equal(x.fp8_scale_inv, x.scale_inv)
    assert x.fp8_bytes.dtype == torch.uint8 and x.fp8_bytes.shape == (6, 16) and not x.fp8_bytes.any()
    # The weight cast is of weight.t(): [in, out], contiguous
    w = snaps[0]["layer0.weight"]
    assert w.fp8_bytes.shape == (16, 24) and w.fp8_bytes.is_contiguous()
    w0 = initial_weights(case, 0, 0)[0]
    assert w.amax_history.item() == w0.abs().max().item()
    grad = snaps[0]["layer1.grad_output"]
    assert grad.fp8_bytes.shape == (6, 8)


@needs_torchao
def test_interception_is_restored_even_when_the_step_fails(stack):
    from torchao.float8 import float8_linear, float8_utils

    before = (float8_linear.hp_tensor_to_float8_dynamic, float8_utils.tensor_to_amax)
    case = _case(steps=1)
    ctx = BuildContext(0, 1, None, torch.device("cpu"), initial_weights(case, 0, 0), 10.0)
    model = stack.build(case.model, ctx)
    with pytest.raises(RuntimeError):
        stack.forward_backward(model, torch.zeros(6, 15), torch.zeros(6, 8))   # wrong input width
    assert (float8_linear.hp_tensor_to_float8_dynamic, float8_utils.tensor_to_amax) == before


@needs_torchao
def test_reference_is_pure_and_simulates_every_rank():
    case = _case(steps=2, construction="init_cast")
    a, b = expected_model(case, 3, 2, 1, 0), expected_model(case, 3, 2, 1, 0)
    assert compare_states(a.steps[1], b.steps[1]) is None
    ranks = [expected_model(case, 3, 2, r, 0) for r in range(2)]
    # data-parallel: one summed gradient, the same weights on every rank; inputs differ
    assert compare_states(ranks[0].final, ranks[1].final, FINAL_FIELDS) is None
    assert compare_states(ranks[0].steps[0], ranks[1].steps[0]) is not None
    local = _case(steps=2, data_parallel=False)
    r0, r1 = (expected_model(local, 3, 2, r, 0) for r in range(2))
    assert compare_states(r0.final, r1.final, FINAL_FIELDS) is not None


# --------------------------------------------------------------------------- lifetime


@needs_torchao
def test_model_dies_whole_and_leaves_nothing_behind(stack):
    import weakref

    before = {k: len(v) for k, v in stack.registries().items()}
    _, _, model = _run(stack, _case(steps=2))
    refs = [weakref.ref(o) for o in stack.model_objects(model)]
    assert stack.reuse_targets(model) == [layer.weight for layer in model.module]
    stack.destroy(model)
    del model
    gc.collect()
    assert all(r() is None for r in refs)
    assert {k: len(v) for k, v in stack.registries().items()} == before


@needs_torchao
def test_forced_reuse_hands_a_dead_weight_id_to_the_next_weight(stack):
    from harness.idreuse.morgue import MORGUE, ReusePolicy, forcing_window

    case = _case(steps=1)
    ctx = BuildContext(0, 1, None, torch.device("cpu"), initial_weights(case, 0, 0), 10.0)
    MORGUE.configure(ReusePolicy.parse("symmetric"), 0)
    try:
        model = stack.build(case.model, ctx)
        dead_ids = [id(t) for t in stack.reuse_targets(model)]
        MORGUE.park(stack.reuse_targets(model))
        del model
        gc.collect()
        with forcing_window():
            model = stack.build(case.model, ctx)
        MORGUE.settle()
        assert [id(t) for t in stack.reuse_targets(model)] == dead_ids
    finally:
        MORGUE.configure(ReusePolicy.parse("natural"), 0)
        MORGUE.clear()


# --------------------------------------------------------------------------- the injected bug


@needs_torchao
def test_id_hook_reduces_once_per_complete_set_and_keeps_dead_ids():
    from harness.stacks.torchao.stack import load

    buggy = load("id-hook")
    buggy.reset()
    try:
        case = _case(steps=3)
        snaps, final, model = _run(buggy, case)
        # The injected hook leaves torchao's numerics alone.
        expected = expected_model(case, 0, 1, 0, 0)
        assert all(compare_states(expected.steps[t], s) is None for t, s in enumerate(snaps))
        (key,) = id_hook.REGISTERED_WEIGHTS
        assert id_hook.REGISTERED_WEIGHTS[key] == {id(layer.weight) for layer in model.module}
        assert len(id_hook.WEIGHT_AMAXES[key]) == 2
        reduced = id_hook.REDUCED_WEIGHT_AMAXES[key]
        w_last = [layer.weight.detach().abs().max() for layer in model.module]
        assert torch.equal(reduced, torch.stack(w_last))    # one rank: the reduction is the identity
        dead = {id(layer.weight) for layer in model.module}
        del model
        gc.collect()
        assert id_hook.REGISTERED_WEIGHTS[key] == dead and set(id_hook.WEIGHT_TO_KEY) == dead
        buggy.reset()
        assert not any(buggy.registries()[name] for name in id_hook.registries())
    finally:
        buggy.reset()
