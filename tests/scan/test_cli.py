"""The scan's command line: output formats, exit status, bad input, unparsable files."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from harness.scan.cli import main
from harness.scan.suppression import read_suppressions

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_TEXT_LINE = re.compile(r"^(?P<path>.+):(?P<line>\d+):(?P<col>\d+): (?P<code>IDK\d{3}) .+ \((hazard|safe|error)\)$")

HAZARD_SOURCE = """\
_REGISTRY = {}


def register(w, key):
    _REGISTRY[id(w)] = key
"""
SAFE_SOURCE = """\
def count_distinct(items):
    seen = set()
    for item in items:
        seen.add(id(item))
    return len(seen)
"""


def write(directory: pathlib.Path, name: str, source: str) -> pathlib.Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def test_hazard_exits_1_with_one_text_line(tmp_path, capsys):
    path = write(tmp_path, "reg.py", HAZARD_SOURCE)
    assert main([str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    match = _TEXT_LINE.match(out[0])
    assert match, out[0]
    assert (match["path"], match["line"], match["col"], match["code"]) == (str(path), "5", "5", "IDK001")
    assert out[0].endswith("(hazard)")


def test_safe_findings_exit_0_and_can_be_hidden(tmp_path, capsys):
    path = write(tmp_path, "safe.py", SAFE_SOURCE)
    assert main([str(path)]) == 0
    assert "(safe)" in capsys.readouterr().out
    assert main([str(path), "--hazards-only"]) == 0
    assert capsys.readouterr().out == ""


def test_clean_file_exits_0(tmp_path, capsys):
    path = write(tmp_path, "clean.py", "def f(x):\n    return repr(id(x))\n")
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == ""


def test_json_format(tmp_path, capsys):
    write(tmp_path, "reg.py", HAZARD_SOURCE)
    write(tmp_path, "safe.py", SAFE_SOURCE)
    assert main(["--format", "json", str(tmp_path)]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [r["code"] for r in records] == ["IDK001", "IDK002"]
    assert [r["severity"] for r in records] == ["hazard", "safe"]
    for record in records:
        assert set(record) == {"file", "line", "col", "code", "severity", "message", "snippet"}
    assert records[0]["snippet"] == "_REGISTRY[id(w)] = key"
    assert records[0]["message"].startswith("dict keyed by id()")


def test_missing_path_is_bad_input_with_one_stderr_line(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert "no such file or directory" in captured.err


def test_no_paths_is_bad_input(capsys):
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2


def test_syntax_error_is_a_finding_and_the_scan_goes_on(tmp_path, capsys):
    write(tmp_path, "a_broken.py", "def f(:\n    pass\n")
    write(tmp_path, "b_nulls.py", "x = 1\0\n")
    write(tmp_path, "c_reg.py", HAZARD_SOURCE)
    assert main(["--format", "json", str(tmp_path)]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [(pathlib.Path(r["file"]).name, r["code"], r["severity"]) for r in records] == [
        ("a_broken.py", "IDK010", "error"),
        ("b_nulls.py", "IDK010", "error"),
        ("c_reg.py", "IDK001", "hazard"),
    ]
    assert records[0]["line"] == 1


def test_directories_are_searched_recursively_for_py_files(tmp_path, capsys):
    write(tmp_path, "pkg/sub/deep.py", HAZARD_SOURCE)
    write(tmp_path, "pkg/notes.txt", HAZARD_SOURCE)
    write(tmp_path, "pkg/.hidden/skipped.py", HAZARD_SOURCE)
    write(tmp_path, "pkg/__pycache__/skipped.py", HAZARD_SOURCE)
    assert main(["--format", "json", str(tmp_path / "pkg")]) == 1
    files = {pathlib.Path(r["file"]).name for r in json.loads(capsys.readouterr().out)}
    assert files == {"deep.py"}


def test_scanned_code_is_never_imported(tmp_path, capsys):
    path = write(tmp_path, "explodes_on_import.py", "raise SystemExit(3)\n" + HAZARD_SOURCE)
    assert main([str(path)]) == 1
    assert "explodes_on_import" not in sys.modules


def test_suppression_reason_may_contain_parentheses():
    source = b"x = {}\nx[id(x)] = 1  # id-hazard: ok(kept alive by f() for the process)\n"
    suppression = read_suppressions(source)[2]
    assert suppression.reason == "kept alive by f() for the process"


def test_python_dash_m_harness_scan(tmp_path):
    path = write(tmp_path, "reg.py", HAZARD_SOURCE)
    result = subprocess.run(
        [sys.executable, "-m", "harness.scan", str(path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "IDK001" in result.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "harness.scan", str(tmp_path / "missing.py")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert missing.returncode == 2
    assert len(missing.stderr.strip().splitlines()) == 1
