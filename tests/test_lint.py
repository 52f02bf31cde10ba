"""The linter configured in pyproject.toml ([tool.ruff]) passes on the tree: unused imports and
variables, undefined names, statement and syntax errors. Skipped, naming the package, where the
test extra is not installed."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def ruff(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    pytest.importorskip("ruff", reason="ruff (the test extra) is not installed")
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_tree_passes_the_linter():
    done = ruff("check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_linter_finds_an_unused_import_and_an_unused_variable(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n\n\ndef f():\n    unused = 1\n")
    done = ruff("check", ".", "--output-format", "concise", cwd=tmp_path)
    assert done.returncode == 1
    assert "F401" in done.stdout and "F841" in done.stdout, done.stdout
