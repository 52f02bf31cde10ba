"""Every entry point's exit status comes from one rule (harness.errors.exit_code), and ``python -m
harness`` dispatches through one table of subcommands."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from harness.cli import COMMANDS, main
from harness.errors import SetupError, UsageError, exit_code

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A python where torch cannot be imported, as on a machine's system python without it.
WITHOUT_TORCH = r"""
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_every_subcommand_names_a_module_with_main():
    for name, (module, text, _) in COMMANDS.items():
        assert callable(importlib.import_module(module).main) and text, name


def test_an_unknown_subcommand_is_one_line_and_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command 'frobnicate'" in err


@pytest.mark.parametrize("error", [UsageError("bad flag"), SetupError("no GPU")])
def test_a_harness_error_is_one_line_and_exit_2(error, capsys):
    def fails():
        raise error

    assert exit_code(fails) == 2
    assert capsys.readouterr().err == f"error: {error}\n"


def test_a_missing_package_is_one_line_and_exit_2(capsys):
    assert exit_code(lambda: 0, needs=("no_such_package_anywhere",)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no no_such_package_anywhere" in err

    def imports_it():
        importlib.import_module("no_such_package_anywhere")

    assert exit_code(imports_it) == 2
    assert "has no no_such_package_anywhere" in capsys.readouterr().err


def test_a_missing_harness_module_is_a_bug_with_its_traceback():
    def imports_ours():
        importlib.import_module("harness.no_such_module")

    with pytest.raises(ModuleNotFoundError):
        exit_code(imports_ours)


@pytest.mark.parametrize("args", [["run", "--sut", "te1", "--world-size", "1"], ["stress", "--minutes", "1"]])
def test_a_python_without_torch_is_one_line_and_exit_2(args):
    proc = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *args], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "has no torch" in lines[0] and "./scripts/setup" in lines[0]
