"""The TE 1.x stack's adapter logic on the CPU, against a small stand-in of the TE 1.x names it
touches (tests/stacks/fake_te1, on sys.path for these tests only). The stand-in is not a
validation: scripts/te1-validate runs the stack on real TE 1.12 and 1.13."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

from harness.collectives.ledger import LEDGER
from harness.runner.inproc import execute_here
from harness.stacks.te1 import onnx_standins

FAKE = pathlib.Path(__file__).parent / "fake_te1"


def _purge() -> None:
    for name in [n for n in sys.modules if n == "transformer_engine" or n.startswith("transformer_engine.")]:
        del sys.modules[name]


@pytest.fixture(params=["1.12", "1.13"])
def release(request, monkeypatch):
    """The stand-in TE of one release on sys.path, and the stack adapted to run on the CPU."""
    from harness.stacks.te1 import stack as stack_module

    paths = [str(FAKE / "pkg"), str(FAKE / ("v" + request.param.replace(".", "_")))]
    _purge()
    for path in paths:
        monkeypatch.syspath_prepend(path)
    monkeypatch.setattr(stack_module, "select_device", lambda rank: torch.device("cpu"))
    monkeypatch.setattr(stack_module.TE1Stack, "_wait", lambda self, device, what: None)
    yield request.param
    _purge()
    onnx_standins.uninstall()


def make_stack(version: str):
    from harness.stacks.te1.stack import TE1Stack

    stack = TE1Stack(version + ".0")
    stack.reset()
    return stack


def te1_case(name: str, **changes):
    from harness.stacks.te1.cases import builtin_cases

    import dataclasses
    case = next(c for c in builtin_cases() if c.name == name)
    return dataclasses.replace(case, **changes) if changes else case


def oracles(result) -> dict:
    out: dict = {}
    for f in result.failures:
        out.setdefault(f.oracle, []).append(f.detail)
    return out


def test_plain_case_passes_the_weight_check_on_both_releases(release):
    stack = make_stack(release)
    case = te1_case("delayed/hybrid-h16-max-m0")
    result = execute_here(case, stack, reuse="off")
    found = oracles(result)
    assert "error" not in found, found
    assert not [d for d in found.get("reference", []) if "weight" in d and "moment" in d], found
    # every step's weights were recorded: the build, each reduction, each optimizer step
    assert result.steps_compared == case.steps * case.models


def test_1_12_keeps_dead_ids_in_its_maps_and_hygiene_names_them(release):
    stack = make_stack(release)
    result = execute_here(te1_case("repro/hygiene"), stack, reuse="off")
    hygiene = " ".join(oracles(result).get("hygiene", []))
    if release == "1.12":
        assert "FP8GlobalStateManager.fp8_param_to_autocast" in hygiene
        assert "FP8GlobalStateManager.autocast_to_fp8_params" in hygiene
    else:
        assert "fp8_param_to_autocast" not in hygiene and "autocast_to_fp8_params" not in hygiene


def test_registries_are_the_releases(release):
    stack = make_stack(release)
    names = set(stack.registries())
    assert {"FP8GlobalStateManager.global_amax_buffer", "float8_tensor.updated_fp8_params"} <= names
    maps = {"FP8GlobalStateManager.fp8_param_to_autocast", "FP8GlobalStateManager.autocast_to_fp8_params"}
    assert (maps <= names) == (release == "1.12")


def test_reductions_go_into_the_ledger_with_their_caller(release):
    stack = make_stack(release)
    result = execute_here(te1_case("delayed/hybrid-h16-max-m0"), stack, reuse="off")
    forward = "te.reduce_and_update_fp8_tensors(forward=True" + (", fp8_weights=False)" if release == "1.12" else ")")
    assert forward + " model 0, step 0, in forward and backward" in [e["op"] for e in result.collectives]
    exits = [e for e in result.collectives if e["op"].startswith(forward)]
    assert "fp8_autocast_exit" in exits[0]["sites"][0], exits[0]["sites"]
    hooks = [e for e in result.collectives if "fp8_weights=True" in e["op"]]
    # 1.12, first model of a fresh key: PR #575's hook reduces after each optimizer step
    assert bool(hooks) == (release == "1.12")
    if hooks:
        assert "post_optimizer_step_fwd_amax_reduction" in hooks[0]["sites"][0]


def test_a_hook_firing_on_every_cast_fails_reference_naming_tensor_step_and_moment(release):
    stack = make_stack(release)
    fp8 = stack.te_mods().float8._fp8          # the stand-in's fp8 module, where its FAULTS are
    case = te1_case("delayed/hybrid-h16-max-m0")
    fp8.FAULTS["hook_everywhere"] = True
    try:
        result = execute_here(case, stack, reuse="off")
    finally:
        fp8.FAULTS["hook_everywhere"] = False
    found = [f for f in result.failures if f.oracle == "reference"]
    assert found, oracles(result)
    assert found[0].step == 0 and found[0].model == 0
    # the first layer's re-cast completes nothing in either release; the hook fires anyway
    assert found[0].detail.startswith("layer0.weight at step 0, post-cast hook before every weight of the model "
                                      "was re-cast in the optimizer step: scale updated at a moment this release "
                                      "does not define: after history[0]: expected ")


def test_a_wrong_update_at_autocast_exit_fails_reference(release):
    stack = make_stack(release)
    fp8 = stack.te_mods().float8._fp8
    fp8.FAULTS["skewed_exit_scale"] = True
    try:
        result = execute_here(te1_case("delayed/hybrid-h16-max-m0"), stack, reuse="off")
    finally:
        fp8.FAULTS["skewed_exit_scale"] = False
    details = [f.detail for f in result.failures if f.oracle == "reference"]
    assert details, oracles(result)


def test_forced_reuse_lands_on_the_weights_data(release):
    stack = make_stack(release)
    result = execute_here(te1_case("reuse/copy-symmetric"), stack)
    assert result.reuse_events > 0 and result.reuse_misses == 0, result.reuse_examples
    if release == "1.12":
        # the new weight's copy completes the dead weights' set: a hook reduction while building
        built = [e for e in result.collectives if "fp8_weights=True" in e["op"] and "was built" in e["op"]]
        assert built and built[0]["op"].endswith("while model 1 was built"), result.collectives
        assert "post_optimizer_step_fwd_amax_reduction" in built[0]["sites"][0]
        assert not any("te1/reuse.py" in site for site in built[0]["sites"])      # the harness's frame is hidden


def test_the_report_names_the_release_and_the_standins(release):
    from harness.stacks.te_common.release import run_info

    make_stack(release).te_mods()
    info = run_info()
    assert info["te_version"] == release + ".0"
    assert set(info["onnx_standins"]) == set(onnx_standins.NAMES)     # torch here has neither module


def test_userbuffers_is_declined_with_a_reason_and_any_world_size_runs():
    from harness.stacks.capabilities import declined_reason
    from harness.stacks.te1.cases import CAPABILITIES, all_cases, builtin_cases

    ub = next(c for c in all_cases() if c.model.userbuffers)
    assert "TE 1.x's Userbuffers" in declined_reason(CAPABILITIES, ub)
    plain = next(c for c in builtin_cases() if c.name == "delayed/te-default")     # in TE's shapes
    for world_size in (1, 2, 4):
        assert declined_reason(CAPABILITIES, plain, world_size) is None


def test_isolation_names_the_hook_reduction_dead_ids_take_away_on_1_12(release):
    """After another case, 1.12's key holds that case's dead ids, so PR #575's hook never completes
    for this case's model; alone (TE's state reset, as in a fresh process) it fires after every
    optimizer step. 1.13 has no hook: the same either way."""
    from harness.oracles.isolation import compare_runs

    stack = make_stack(release)
    case = te1_case("delayed/hybrid-h16-max-m0")
    runs = []
    for reset in (True, False, True):      # alone, after a case of the same recipe, alone again
        if reset:
            stack.reset()
        runs.append(execute_here(case, stack, reuse="off"))
    alone, shared, again = runs
    assert compare_runs(again, alone) == []
    lines = compare_runs(shared, alone)
    if release == "1.13":
        assert lines == []
        return
    assert len(lines) == 1, lines
    assert "collective sequence differs from the isolated run" in lines[0]
    assert ("; alone #2 te.reduce_and_update_fp8_tensors(forward=True, fp8_weights=True) model 0, step 0, "
            "in the optimizer step MAX [] at pytorch/tensor/float8_tensor.py:35 post_optimizer_step_fwd_amax_reduction"
            ) in lines[0], lines[0]


def test_a_recorded_reduction_point_is_the_same_with_and_without_a_process_group(tmp_path):
    """A rank of one runs its case in a process with a gloo group while the case's isolated run
    alongside has none: the reduction points both record must compare equal (on one H200 they did
    not, and isolation failed every case of TE 1.12 and 1.13 at reduction point 0)."""
    import torch.distributed as dist

    from harness.collectives.entry import signature

    def point():
        return LEDGER.record_call("te.reduce_and_update_fp8_tensors(forward=True) model 0, step 0", reduce="MAX")

    recorded = []
    for grouped in (False, True):
        if grouped:
            dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
        try:
            recorded.append(point())          # one call site for both
        finally:
            if grouped:
                dist.destroy_process_group()
    without, with_group = recorded
    assert signature(with_group, with_sizes=False) == signature(without, with_sizes=False)


def test_tes_package_checks_are_answered_from_metadata_not_pip(release):
    from harness.stacks.te_common.release import run_info
    from harness.stacks.te1 import availability, package_check

    try:
        mods = availability.te_modules()
        common = sys.modules["transformer_engine.common"]
        assert common.is_package_installed is package_check.installed
        assert sys.modules["transformer_engine.pytorch"].LOADED_WITH is True      # the stand-in's dist-info
        assert common.CALLS == []                                                # pip was never asked
        assert package_check.installed("no-such-distribution-anywhere") is False
        assert run_info()["package_check_from_metadata"] is True
        assert mods.te is sys.modules["transformer_engine.pytorch"]
    finally:
        package_check.uninstall()


def test_without_the_answer_the_stand_in_asks_pip(release):
    """The known-bad side: TE's own check runs when the answer is not installed."""
    import importlib

    from harness.stacks.te1 import onnx_standins, package_check

    package_check.uninstall()
    onnx_standins.install()
    importlib.import_module("transformer_engine.pytorch")
    common = sys.modules["transformer_engine.common"]
    assert sys.modules["transformer_engine.pytorch"].LOADED_WITH == "asked pip"
    assert common.CALLS == ["transformer-engine"]
    assert package_check.in_place() is False
