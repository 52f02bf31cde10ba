"""The scan's command line: output formats, exit status, bad input, unparsable files."""

from __future__ import annotations

import json
import pathlib
import platform
import re
import subprocess
import sys
import textwrap

import pytest

from harness.scan.cli import main
from harness.scan.suppression import read_suppressions

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_TEXT_LINE = re.compile(r"^(?P<path>.+):(?P<line>\d+):(?P<col>\d+): (?P<code>IDK\d{3}) .+ \((hazard, (high|low) confidence|safe|error)\)$")

HAZARD_SOURCE = """\
REGISTRY = {}


def register(w, key):
    REGISTRY[id(w)] = key
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


def test_hazard_exits_1_with_a_header_why_fix_and_its_uses(tmp_path, capsys):
    path = write(tmp_path, "reg.py", HAZARD_SOURCE)
    assert main([str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    match = _TEXT_LINE.match(out[0])
    assert match, out[0]
    assert (match["path"], match["line"], match["col"], match["code"]) == (str(path), "5", "5", "IDK001")
    assert out[0].endswith("REGISTRY (1 store) (hazard, high confidence)")
    assert out[1].startswith("    why: module-level REGISTRY lives for the whole process")
    assert out[2].startswith("    confidence: high: the container lives for the whole process")
    assert out[3].startswith("    fix: key the registry by the object itself in a weakref.WeakKeyDictionary")
    assert out[4] == f"    store  {path}:5:5: IDK001 REGISTRY[id(w)]"
    assert len(out) == 5


def test_uses_of_one_registry_are_one_finding(tmp_path, capsys):
    path = write(tmp_path, "memo.py", """\
        _SEEN = {}


        def visit(node):
            if id(node) in _SEEN:
                return _SEEN[id(node)]
            _SEEN[id(node)] = node.name
            return _SEEN.get(id(node))
        """)
    assert main(["--format", "json", str(path)]) == 1
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 1
    assert records[0]["registry"] == "_SEEN"
    assert [(u["line"], u["role"]) for u in records[0]["uses"]] == [(5, "read"), (6, "read"), (7, "store"), (8, "read")]
    assert "(1 store, 3 reads)" in records[0]["message"]


def test_expressions_are_shown_whole(tmp_path, capsys):
    long_name = "a_registry_with_a_name_long_enough_to_pass_sixty_characters_alone"
    path = write(tmp_path, "long.py", f"{long_name} = {{}}\n\n\ndef f(x):\n    {long_name}[id(x)] = 1\n")
    assert main([str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{long_name}[id(x)]" in out
    assert "..." not in out


def test_safe_findings_exit_0_are_shown_by_all_and_hidden_by_hazards_only(tmp_path, capsys):
    path = write(tmp_path, "safe.py", SAFE_SOURCE)
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == ""
    assert main([str(path), "--all"]) == 0
    assert "(safe)" in capsys.readouterr().out
    assert main([str(path), "--all", "--hazards-only"]) == 0
    assert capsys.readouterr().out == ""


def test_clean_file_exits_0(tmp_path, capsys):
    path = write(tmp_path, "clean.py", "def f(x):\n    return repr(id(x))\n")
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == ""


def test_json_format(tmp_path, capsys):
    write(tmp_path, "reg.py", HAZARD_SOURCE)
    write(tmp_path, "safe.py", SAFE_SOURCE)
    assert main(["--format", "json", "--all", str(tmp_path)]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [r["code"] for r in records] == ["IDK001", "IDK002"]
    assert [r["severity"] for r in records] == ["hazard", "safe"]
    assert [r["confidence"] for r in records] == ["high", None]
    for record in records:
        assert set(record) == {
            "file", "line", "col", "code", "severity", "registry", "message", "why", "fix", "snippet", "uses",
            "confidence", "confidence_reason",
        }
    assert records[0]["snippet"] == "REGISTRY[id(w)] = key"
    assert records[0]["message"].startswith("dict keyed by id(): REGISTRY")
    assert "WeakKeyDictionary" in records[0]["fix"]
    assert records[1]["fix"] == ""
    assert records[1]["why"] == "local seen dies when count_distinct() returns"


def test_missing_path_is_bad_input_with_one_stderr_line(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert "no such file or directory" in captured.err


@pytest.mark.parametrize("make", [lambda d: str(d / "empty"), lambda d: ""], ids=["empty-directory", "empty-string"])
def test_empty_path_is_bad_input_with_one_stderr_line(tmp_path, capsys, make):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no python here")
    assert main([make(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert "error:" in captured.err


def test_no_paths_scans_the_current_directory(tmp_path, capsys, monkeypatch):
    write(tmp_path, "reg.py", HAZARD_SOURCE)
    monkeypatch.chdir(tmp_path)
    assert main([]) == 1
    assert capsys.readouterr().out.startswith("reg.py:5:5: IDK001 ")


def test_an_unknown_option_is_one_line_and_exit_2(tmp_path, capsys):
    write(tmp_path, "safe.py", SAFE_SOURCE)
    assert main([str(tmp_path), "--json", "out.json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["python -m harness scan: error: unrecognized arguments: --json out.json"]


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


def test_parse_failure_names_the_python_that_parsed_it(tmp_path, capsys):
    write(tmp_path, "newer.py", "def f[T](x: T) -> T:\n    return x\n" if sys.version_info < (3, 12) else "x = (\n")
    assert main(["--format", "json", str(tmp_path)]) == 1
    record = json.loads(capsys.readouterr().out)[0]
    assert record["code"] == "IDK010"
    assert f"parsed by Python {platform.python_version()}" in record["message"]


def test_sentinel_registries_are_printed_as_plugin_options(tmp_path, capsys):
    package = tmp_path / "src" / "pkg"
    write(package, "__init__.py", "")
    write(package, "state.py", """\
        _BY_ID = {}


        class Manager:
            params = {}

            @classmethod
            def track(cls, p, key):
                cls.params[id(p)] = key


        class Holder:
            def __init__(self):
                self.seen = set()

            def add(self, x):
                self.seen.add(id(x))


        def remember(x, v):
            _BY_ID[id(x)] = v


        def recall(x):
            return _BY_ID.get(id(x))
        """)
    assert main(["--sentinel-registries", str(package)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "--sentinel-registry=pkg.state:Manager.params",
        "--sentinel-registry=pkg.state:_BY_ID",
    ]
    assert captured.err == ""    # Holder.seen is of low confidence: not reported by default
    assert main(["--sentinel-registries", "--all", str(package)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert "Holder.seen" in captured.err and "not watchable" in captured.err


def test_sentinel_registries_name_a_namespace_package_scanned_by_name(tmp_path, capsys, monkeypatch):
    write(tmp_path, "ns/core/__init__.py", "")
    write(tmp_path, "ns/core/utils.py", HAZARD_SOURCE)
    monkeypatch.chdir(tmp_path)
    assert main(["--sentinel-registries", "ns"]) == 0
    assert capsys.readouterr().out == "--sentinel-registry=ns.core.utils:REGISTRY\n"
    assert main(["--sentinel-registries", "."]) == 0
    assert capsys.readouterr().out == "--sentinel-registry=ns.core.utils:REGISTRY\n"


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


def test_a_registry_with_safe_and_hazardous_uses_is_one_hazard_finding(tmp_path, capsys):
    path = write(tmp_path, "mixed.py", """\
        _REG = {}


        def keep(x, v):
            _REG[id(x)] = (x, v)


        def forget(y, v):
            _REG[id(y)] = v


        def find(z):
            return _REG.get(id(z))
        """)
    assert main(["--format", "json", str(path)]) == 1
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 1
    assert records[0]["severity"] == "hazard" and "(2 stores, 1 read)" in records[0]["message"]
    assert [(u["line"], u["severity"]) for u in records[0]["uses"]] == [(5, "safe"), (9, "hazard"), (13, "hazard")]
    assert "id(y)" in records[0]["why"] and "_REG.get(id(z))" in records[0]["why"]


def test_scan_time_side_by_side_refuses_an_unknown_commit_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "scan-time-side-by-side"), "no-such-commit-0bad", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "scan-time-side-by-side: 'no-such-commit-0bad' names no commit of this repository"]
