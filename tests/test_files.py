"""Reports and records are written whole or not at all (harness/files.py), and nowhere else."""

from __future__ import annotations

import ast
import os
import pathlib

import pytest

from harness import files
from harness.files import write_atomic

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Files under harness/ that open a file for writing themselves, each with how many such calls
# and why it is not a report or record: a stream written while a process runs, or a claim
# whose being created first is the point.
STREAMS = {
    "harness/files.py": (1, "the atomic write itself"),
    "harness/collectives/ledger.py": (1, "the collective ledger, appended line by line as a rank runs"),
    "harness/runner/launchers/spawn.py": (1, "a rank's output, written while it runs"),
    "harness/runner/launchers/torchrun.py": (1, "the torchrun agent's output, written while it runs"),
    "harness/runner/launchers/mpirun.py": (1, "mpirun's output, written while it runs"),
    "harness/runner/rank/worker.py": (1, "the stack dumps faulthandler appends to while a rank runs"),
    "harness/faultmatrix/subproc.py": (1, "a child run's stderr, written while it runs"),
    "harness/bench/bare.py": (1, "a bare-loop rank's output, written while it runs"),
    "harness/stress/groups.py": (1, "a rank group's stdout, written while it runs"),
    "harness/stress/claims.py": (1, "a claim file: created exclusively (O_EXCL), its existence is the claim"),
}

WRITE_MODES = ("w", "a", "x", "+")


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode argument of ``open``/``fdopen`` when it is a literal (``"r"`` when left out)."""
    node = call.args[position] if len(call.args) > position else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    if node is None:
        return "r"
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "?"


def writes_in(source: str) -> list[int]:
    """Lines of ``source`` that open a file for writing or write one in one call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("write_text", "write_bytes") and isinstance(func, ast.Attribute):
            found.append(node.lineno)
        elif (name == "open" and not (isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "os")
              or name == "fdopen"):     # os.open takes flags, not a mode
            mode = _mode(node, 1)
            if mode == "?" or any(c in mode for c in WRITE_MODES):
                found.append(node.lineno)
    return sorted(found)


def writes_under(root: pathlib.Path) -> dict[str, list[int]]:
    out = {}
    for path in sorted((root / "harness").rglob("*.py")):
        lines = writes_in(path.read_text())
        if lines:
            out[path.relative_to(root).as_posix()] = lines
    return out


def unexplained(found: dict[str, list[int]], streams=STREAMS) -> list[str]:
    problems = []
    for path, lines in found.items():
        allowed = streams.get(path, (0, ""))[0]
        if len(lines) != allowed:
            problems.append(f"{path}: {len(lines)} direct write(s) at lines {lines}, {allowed} explained")
    return problems


def test_every_report_and_record_is_written_through_write_atomic():
    problems = unexplained(writes_under(ROOT))
    assert not problems, ("write reports and records with harness.files.write_atomic, or add a stream "
                          "to STREAMS with its reason:\n" + "\n".join(problems))


def test_the_check_finds_a_direct_write(tmp_path):
    (tmp_path / "harness" / "report").mkdir(parents=True)
    (tmp_path / "harness" / "report" / "new.py").write_text(
        "import json, pathlib\n"
        "def save(d, p):\n"
        "    with open(p, 'w') as fh:\n"
        "        json.dump(d, fh)\n"
        "def read(p):\n"
        "    return open(p).read(), open(p, mode='rb').read()\n"
        "def also(p, m):\n"
        "    pathlib.Path(p).write_text('x')\n"
        "    open(p, m)\n")
    found = writes_under(tmp_path)
    assert found == {"harness/report/new.py": [3, 8, 9]}
    assert unexplained(found, {}) == ["harness/report/new.py: 3 direct write(s) at lines [3, 8, 9], 0 explained"]


def test_text_and_bytes_land_whole_with_the_umask_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(str(tmp_path / "r.json"), '{"é": 1}')
        write_atomic(str(tmp_path / "p.png"), b"\x89PNG")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == '{"é": 1}'
    assert (tmp_path / "p.png").read_bytes() == b"\x89PNG"
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.png", "r.json"]


def test_the_bytes_reach_the_disk_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(files.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    write_atomic(str(tmp_path / "r.json"), "{}")
    assert events[:2] == ["fsync", "replace"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "stress.json"
    target.write_text("old")

    def refuse(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(str(target), "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["stress.json"]


def test_a_missing_folder_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(str(tmp_path / "no" / "r.json"), "{}")
