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


# The released package each bug lives in, beyond torch (the test extra installs them: ./scripts/test).
PACKAGES = {"megatron-": ("megatron.core", "megatron-core"), "accelerate-": ("accelerate", "accelerate")}


def _require_release(bug: str) -> None:
    """The torch case reproduces torch 2.13's code (the version the project pins); the others need
    their released package, and are skipped naming it where it is not installed."""
    for prefix, (module, package) in PACKAGES.items():
        if bug.startswith(prefix):
            try:
                __import__(module)
            except ImportError:
                pytest.skip(f"{bug} needs the package {package} (in the test extra: pip install -e '.[test]', "
                            f"or ./scripts/test)")
    if bug.startswith("torch-"):
        import torch

        if not torch.__version__.startswith("2.13."):
            pytest.skip(f"{bug} reproduces torch 2.13's _local_tensor; this is torch {torch.__version__}")


def _runs(bug: str, form: Form, reuse: bool, count: int):
    _require_release(bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # megatron-core warns that TE and Apex are absent
        return [SCENARIOS[bug](form, reuse) for _ in range(count)]


def _command(bug: str, test: str, prefix: str = "") -> str:
    return f"./scripts/test 'cases/test_real_bugs.py::{test}[{prefix}{bug}]' -s"


@pytest.mark.parametrize("bug", sorted(SCENARIOS))
@pytest.mark.parametrize("form", list(Form), ids=[form.value for form in Form])
def test_every_run_answers_as_its_form_says(form, bug):
    """Released: every run wrong, the new object on the dead one's address, the dead id found
    in the registry. Fixed: every run right, landed the same way, nothing stale."""
    released = form is Form.RELEASED

    def as_expected(o) -> bool:
        return o.landed and o.wrong == released and bool(o.stale) == released

    outcomes = _runs(bug, form, True, N)
    count = sum(as_expected(o) for o in outcomes)
    verdict = "wrong" if released else "right"
    print(f"\n{bug}: {form.value} code {verdict} in {count} of {N} runs; first: {outcomes[0].describe()}")
    bad = next((o for o in outcomes if not as_expected(o)), None)
    assert bad is None, (
        f"{bug}: {form.value} code {verdict} in only {count} of {N} runs; a run that was not: {bad.describe()}\n"
        f"reproduce: {_command(bug, 'test_every_run_answers_as_its_form_says', form.value + '-')}"
    )


@pytest.mark.parametrize("bug", sorted(SCENARIOS))
def test_released_code_is_right_when_no_address_comes_back(bug):
    outcomes = _runs(bug, Form.RELEASED, False, CONTROL_RUNS)
    bad = next((o for o in outcomes if o.wrong or o.landed or o.stale), None)
    assert bad is None, (
        f"{bug}: wrong answer without address reuse, so the reproducer is not showing the id bug: {bad.describe()}\n"
        f"reproduce: {_command(bug, 'test_released_code_is_right_when_no_address_comes_back')}"
    )
