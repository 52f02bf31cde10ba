"""``--te1-onnx-standins``: a plain pytest session imports a package that does what TE 1.x does at
import (the two torch.onnx modules torch >= 2.11 removed) without a conftest of its own."""

from __future__ import annotations

import importlib

import pytest

from harness.stacks.te1 import onnx_standins

pytest_plugins = ["pytester"]

FAKE_TE = """
from torch.onnx import _type_utils
from torch.onnx._internal import jit_utils

def annotated(g: jit_utils.GraphContext):
    return g
"""

IMPORTS_TE = "import transformer_engine\n\ndef test_imports():\n    assert transformer_engine.annotated(1) == 1\n"


def _removed_here() -> bool:
    for name in onnx_standins.NAMES:
        try:
            importlib.import_module(name)
        except ImportError:
            return True
    return False


needs_new_torch = pytest.mark.skipif(not _removed_here(), reason="this torch still has the torch.onnx modules")


@pytest.fixture
def fake_te(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.mkpydir("transformer_engine").joinpath("__init__.py").write_text(FAKE_TE)
    pytester.makepyfile(test_te=IMPORTS_TE)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # A subprocess: the stand-ins go into sys.modules, which must not leak into this session.
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest", *args)


@needs_new_torch
def test_without_the_option_the_import_fails(fake_te):
    result = run(fake_te)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ImportError: cannot import name *_type_utils* from *torch.onnx*"])


@needs_new_torch
@pytest.mark.parametrize("how", ["option", "ini"])
def test_with_the_option_or_ini_the_import_works(fake_te, how):
    if how == "ini":
        fake_te.makeini("[pytest]\nte1_onnx_standins = true\n")
    args = ["-p", "harness.sentinel"] + (["--te1-onnx-standins"] if how == "option" else [])
    result = run(fake_te, *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["te1 onnx stand-ins: torch.onnx._type_utils, torch.onnx._internal.jit_utils*"])


def test_te_imported_before_the_standins_is_a_usage_error(fake_te):
    # A plugin loaded first that imported TE (here: put a module under its name).
    fake_te.makepyfile(early_plugin="import sys, types\nsys.modules['transformer_engine'] = types.ModuleType('transformer_engine')\n")
    fake_te.syspathinsert()
    result = run(fake_te, "-p", "early_plugin", "-p", "harness.sentinel", "--te1-onnx-standins")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --te1-onnx-standins: transformer_engine was imported before the stand-ins*"])
