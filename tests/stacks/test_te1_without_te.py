"""The TE 1.x stack where TE is missing (this machine), its refusal of TE 2.x, and the ONNX stand-ins."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.errors import SetupError
from harness.stacks.te_common import release
from harness.stacks.te1 import availability, onnx_standins

CHILD = """
import sys
import torch
import harness.stacks.te1.stack, harness.stacks.te1.probe
from harness.stacks import load_stack
try:
    load_stack("te1")
except Exception as exc:
    print(type(exc).__name__, exc)
print("te imported:", any(n.startswith("transformer_engine") for n in sys.modules))
print("cuda initialised:", torch.cuda.is_initialized())
"""


def test_loading_without_te_declines_in_one_line_and_imports_nothing():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("SetupError --sut te1: transformer_engine is not installed here")
    assert lines[1:] == ["te imported: False", "cuda initialised: False"]


def test_the_run_exits_2_with_one_line():
    out = subprocess.run([sys.executable, "-m", "harness", "run", "--sut", "te1", "--world-size", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--sut te1: transformer_engine is not installed" in out.stderr


def test_require_raises_setup_error():
    if availability.missing_reason() is None:
        pytest.skip("TE 1.x and a GPU are here")
    with pytest.raises(SetupError):
        availability.require()


def test_each_stack_refuses_the_other_release_line():
    assert release.line_refusal("te1", 1, "te", "1.12.0") is None
    assert release.line_refusal("te1", 1, "te", None) is None
    assert release.line_refusal("te1", 1, "te", "2.20.2") == (
        "--sut te1 runs Transformer Engine 1.x and this is TE 2.20.2: use --sut te")
    assert release.line_refusal("te", 2, "te1", "1.13.0") == (
        "--sut te runs Transformer Engine 2.x and this is TE 1.13.0: use --sut te1")


def test_te_stack_reports_carry_version_and_standins(monkeypatch):
    monkeypatch.setattr(release, "installed_version", lambda: "1.13.0")
    from harness.stacks import run_info

    assert run_info("te1")["te_version"] == "1.13.0"
    assert run_info("te")["te_version"] == "1.13.0"
    assert run_info("emulated-patched") == {}


def test_standins_serve_only_missing_modules_and_refuse_use():
    missing = ("torch.onnx._harness_no_such_module", "json")
    try:
        assert onnx_standins.install(missing) == ("torch.onnx._harness_no_such_module",)
        assert not getattr(sys.modules["json"], onnx_standins.MARKER, False)      # a real module stays
        from torch.onnx import _harness_no_such_module as standin
        with pytest.raises(RuntimeError, match="ONNX export is not available"):
            standin.JitScalarType
    finally:
        onnx_standins.uninstall(missing)
    assert onnx_standins.installed(missing) == ()


def test_standins_make_te_1x_onnx_imports_work_on_this_torch():
    code = ("from harness.stacks.te1 import onnx_standins\n"
            "before = onnx_standins.installed()\n"
            "now = onnx_standins.install()\n"
            "from torch.onnx import _type_utils\n"
            "from torch.onnx._internal import jit_utils\n"
            "def f(g: jit_utils.GraphContext): pass\n"
            "print(before, now)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    real = [n for n in onnx_standins.NAMES if _importable(n)]
    assert out.stdout.strip() == f"() {tuple(n for n in onnx_standins.NAMES if n not in real)!r}"


def _importable(name: str) -> bool:
    code = f"import importlib; importlib.import_module({name!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0


def test_more_ranks_than_gpus_share_them_and_no_gpu_is_refused(monkeypatch):
    from harness.stacks.te_common import gpus
    from harness.stacks.te1.stack import TE1Stack

    monkeypatch.setattr(gpus, "visible_gpus", lambda: [gpus.Gpu(0, "NVIDIA H100", (9, 0))])
    TE1Stack("1.12.0").check_world_size(2)
    TE1Stack("1.12.0").check_world_size(4)
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [])
    with pytest.raises(SetupError, match=r"^--sut te1 --world-size 2: no GPU visible here; TE's FP8 needs a CUDA GPU"):
        TE1Stack("1.12.0").check_world_size(2)
