"""The TE 1.x weight-update check (harness/stacks/te1/moments.py): pure, on hand-made records,
with a known-bad input for every way it can fail."""

from __future__ import annotations

import pytest
import torch

from harness.fp8.formats import Fp8Format
from harness.fp8.recipe import DelayedScalingRecipe
from harness.fp8.scaling import delayed_scaling_update
from harness.stacks.te1.moments import (Moment, Phase, ReleaseLine, WeightRecord, WeightState, check_weight_updates,
                                        classify, resized)

RECIPE = DelayedScalingRecipe(amax_history_len=4)
FMT = Fp8Format.E4M3
HOOK = ReleaseLine.HOOK.defined_moments()
EXIT_ONLY = ReleaseLine.EXIT_ONLY.defined_moments()


def state(history, scale=1.0) -> WeightState:
    return WeightState(torch.tensor(history, dtype=torch.float32), torch.tensor(scale, dtype=torch.float32))


def updated(before: WeightState) -> WeightState:
    history, scale, _ = delayed_scaling_update(before.history, before.scale, before.history[0], RECIPE, FMT)
    return WeightState(history, scale)


def reduction(step, moment, before, after=None) -> WeightRecord:
    return WeightRecord("layer0.weight", step, moment, before, updated(before) if after is None else after)


def observed(step, s) -> WeightRecord:
    return WeightRecord("layer0.weight", step, Moment.OBSERVED, s, s)


def a_good_run(hook: bool) -> list[WeightRecord]:
    """Build (w_0 = 2 recorded), step 0's exit update, optimizer cast of w_1 = 3, then (hook) the
    post-optimizer update or (no hook) step 1's exit update of that amax."""
    built = state([2.0, 0, 0, 0])
    records = [observed(-1, built)]
    exit0 = reduction(0, Moment.AUTOCAST_EXIT, built)
    records.append(exit0)
    cast = WeightState(exit0.after.history.clone(), exit0.after.scale)
    cast.history[0] = 3.0
    if hook:
        post = reduction(0, Moment.AFTER_OPTIMIZER_STEP, cast)
        records += [post, observed(0, post.after)]
    else:
        records += [observed(0, cast), reduction(1, Moment.AUTOCAST_EXIT, cast)]
    return records


@pytest.mark.parametrize("line, hook", [(HOOK, True), (HOOK, False), (EXIT_ONLY, False)])
def test_updates_at_defined_moments_pass(line, hook):
    assert check_weight_updates(a_good_run(hook), RECIPE, FMT, line) is None


def test_the_post_optimizer_hook_is_not_a_moment_of_1_13():
    found = check_weight_updates(a_good_run(hook=True), RECIPE, FMT, EXIT_ONLY)
    assert found is not None
    assert found.startswith("layer0.weight at step 0, post-cast hook after every weight of the model was re-cast")
    assert "does not define" in found and "history[0]" in found


def test_a_hook_reduction_while_the_model_is_built_fails_when_it_changes_the_weight():
    built = state([2.0, 0, 0, 0])
    records = [reduction(-1, Moment.HOOK_DURING_BUILD, built)]
    found = check_weight_updates(records, RECIPE, FMT, HOOK)
    assert found.startswith("layer0.weight while the model was built, post-cast hook while the model was built: "
                            "scale updated at a moment this release does not define")
    assert "0x" in found            # bit patterns of the first differing element


def test_an_unplanned_reduction_that_changes_nothing_passes():
    zero = state([0.0, 0, 0, 0])
    assert check_weight_updates([reduction(-1, Moment.HOOK_DURING_BUILD, zero, zero)], RECIPE, FMT, HOOK) is None


def test_a_wrong_update_at_a_defined_moment_fails():
    built = state([2.0, 0, 0, 0])
    good = updated(built)
    bad = WeightState(good.history, torch.nextafter(good.scale, torch.tensor(float("inf"))))
    found = check_weight_updates([reduction(0, Moment.AUTOCAST_EXIT, built, bad)], RECIPE, FMT, EXIT_ONLY)
    assert found.startswith("layer0.weight at step 0, autocast exit (a moment this release defines): "
                            "not the delayed-scaling update: after scale")


def test_a_defined_update_that_did_not_happen_fails():
    built = state([2.0, 0, 0, 0])
    found = check_weight_updates([reduction(0, Moment.AUTOCAST_EXIT, built, built)], RECIPE, FMT, EXIT_ONLY)
    assert found is not None and "not the delayed-scaling update" in found


def test_a_change_between_records_fails():
    records = a_good_run(hook=False)
    last = records[-1]
    moved = WeightState(last.before.history.clone(), last.before.scale * 2)
    records[-1] = reduction(1, Moment.AUTOCAST_EXIT, moved)
    found = check_weight_updates(records, RECIPE, FMT, EXIT_ONLY)
    assert found.startswith("layer0.weight at step 1, autocast exit: updated at a moment no record saw")


def test_history_length_change_at_the_first_forward_is_tes_cut():
    long = state([2.0] + [0.0] * 9)
    short = state([2.0, 0, 0, 0])
    assert check_weight_updates([observed(-1, long), reduction(0, Moment.AUTOCAST_EXIT, short)], RECIPE, FMT,
                                EXIT_ONLY) is None
    assert torch.equal(resized(torch.tensor([1.0, 2.0]), 4), torch.tensor([1.0, 2.0, 0.0, 0.0]))
    assert torch.equal(resized(torch.tensor([1.0, 2.0, 3.0]), 2), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("caller, phase, recast, moment", [
    ("fp8_autocast_exit", Phase.STEP, 0, Moment.AUTOCAST_EXIT),
    ("fp8_autocast_exit", Phase.BUILD, 0, Moment.OTHER),
    ("post_optimizer_step_fwd_amax_reduction", Phase.OPTIMIZER, 2, Moment.AFTER_OPTIMIZER_STEP),
    ("post_optimizer_step_fwd_amax_reduction", Phase.OPTIMIZER, 1, Moment.HOOK_DURING_OPTIMIZER_STEP),
    ("post_optimizer_step_fwd_amax_reduction", Phase.BUILD, 0, Moment.HOOK_DURING_BUILD),
    ("post_optimizer_step_fwd_amax_reduction", Phase.IDLE, 0, Moment.HOOK_ELSEWHERE),
    ("somewhere", Phase.STEP, 0, Moment.OTHER),
])
def test_classify(caller, phase, recast, moment):
    assert classify(caller, phase, recast, weights=2) is moment


def test_release_lines():
    assert ReleaseLine.of_version("1.12.0") is ReleaseLine.HOOK
    assert ReleaseLine.of_version("1.13.0+abc") is ReleaseLine.EXIT_ONLY
    for bad in ("2.1.0", "x", "1"):
        with pytest.raises(ValueError):
            ReleaseLine.of_version(bad)
