"""Released third-party code with an id()-keyed registry, made to answer wrong every time.

Each bug (a module of :mod:`harness.classcases`, written up in ``docs/real-bugs.md``) runs
N times in its released form -- every run must give the new object the dead object's answer,
and the hygiene oracle must find the dead object's id in the registry -- and N times with the
registry fixed in place, where every run must answer right and leave nothing stale. The
control runs the released code with the old object kept alive: no address comes back, and
the answer is right, so the wrong answers above are the address reuse's doing.
"""

from __future__ import annotations

import warnings

import pytest

from harness.classcases import accelerate_tied_params, megatron_attr_cache, torch_mesh_coordinates
from harness.classcases.realbug import Form

N = 20
CONTROL_RUNS = 3

SCENARIOS = {
    "torch-local-tensor-coordinate-cache": lambda form, reuse: torch_mesh_coordinates.run(form, reuse),
    "megatron-sequence-parallel-attr-cache": lambda form, reuse: megatron_attr_cache.run(
        form, megatron_attr_cache.Cache.SEQUENCE_PARALLEL, reuse),
    "megatron-cuda-graph-attr-cache": lambda form, reuse: megatron_attr_cache.run(
        form, megatron_attr_cache.Cache.CUDA_GRAPHS, reuse),
    "accelerate-fsdp-tied-params": lambda form, reuse: accelerate_tied_params.run(form, reuse),
}


def _require_release(bug: str) -> None:
    """The torch case reproduces torch 2.13's code (the version the project pins)."""
    if bug.startswith("torch-"):
        import torch

        if not torch.__version__.startswith("2.13."):
            pytest.skip(f"{bug} reproduces torch 2.13's _local_tensor; this is torch {torch.__version__}")


def _runs(bug: str, form: Form, reuse: bool, count: int):
    _require_release(bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # megatron-core warns that TE and Apex are absent
        return [SCENARIOS[bug](form, reuse) for _ in range(count)]


def _command(bug: str, test: str) -> str:
    return f"./scripts/test 'cases/test_real_bugs.py::{test}[{bug}]' -s"


@pytest.mark.parametrize("bug", sorted(SCENARIOS))
def test_released_code_answers_wrong_every_time(bug):
    outcomes = _runs(bug, Form.RELEASED, True, N)
    wrong = sum(o.wrong and o.landed and bool(o.stale) for o in outcomes)
    print(f"\n{bug}: released code wrong in {wrong} of {N} runs; first: {outcomes[0].describe()}")
    bad = next((o for o in outcomes if not (o.wrong and o.landed and o.stale)), None)
    assert bad is None, (
        f"{bug}: released code wrong in only {wrong} of {N} runs; a run that was not: {bad.describe()}\n"
        f"reproduce: {_command(bug, 'test_released_code_answers_wrong_every_time')}"
    )


@pytest.mark.parametrize("bug", sorted(SCENARIOS))
def test_fixed_registry_answers_right_every_time(bug):
    outcomes = _runs(bug, Form.FIXED, True, N)
    right = sum(not o.wrong and o.landed and not o.stale for o in outcomes)
    print(f"\n{bug}: fixed registry right in {right} of {N} runs")
    bad = next((o for o in outcomes if o.wrong or not o.landed or o.stale), None)
    assert bad is None, (
        f"{bug}: fixed registry right in only {right} of {N} runs; a run that was not: {bad.describe()}\n"
        f"reproduce: {_command(bug, 'test_fixed_registry_answers_right_every_time')}"
    )


@pytest.mark.parametrize("bug", sorted(SCENARIOS))
def test_released_code_is_right_when_no_address_comes_back(bug):
    outcomes = _runs(bug, Form.RELEASED, False, CONTROL_RUNS)
    bad = next((o for o in outcomes if o.wrong or o.landed or o.stale), None)
    assert bad is None, (
        f"{bug}: wrong answer without address reuse, so the reproducer is not showing the id bug: {bad.describe()}\n"
        f"reproduce: {_command(bug, 'test_released_code_is_right_when_no_address_comes_back')}"
    )
