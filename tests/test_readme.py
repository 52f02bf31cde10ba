"""Every command of the README runs as written, from a plain shell after the README's own set-up line.

Each fenced block of README.md is one of:

* a ```python block whose first line is ``# NAME.py``: a file the reader creates; it is written
  into the checkout's copy before any command runs (the stack skeleton, the minimal stack);
* a ```text block: not commands (the layout), left alone;
* a block whose first line starts with ``$ ``: an example, one command and what it prints; the
  command runs and every line shown (``...`` skips lines) must appear in its output, in order,
  after :func:`normalise` (times, reuse counts and object ids change from run to run);
* any other block: commands, one a line (``\\`` continues one; ``#`` lines and trailing ``  # ...``
  comments are not commands). Each runs as written, except those in :data:`DRY`.

Each command runs in a fresh ``bash`` from a copy of the checkout (what a fresh clone holds: the
tracked files and the untracked ones git does not ignore), whose ``.venv`` is this test's own, with
no virtual environment on the PATH and no ``VIRTUAL_ENV``: the README's first command line (its
set-up line) first, then the command. It fails on ``No module named``, on a traceback, and on an
exit status other than 0 (passed) or 1 (failures found: the buggy stacks). Any README block added
later is covered the same way; a command that cannot run here goes into :data:`DRY` with why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
HANG_GUARD_S = 1200        # a hung command ends the test; how long a command takes is not checked

# Commands the test runs in a dry form, each with why: over 60 s on two cores, a GPU, two hosts, or
# files that only such a run writes. The dry form still parses every option, loads the stack, checks
# the launcher is on the PATH (`--list` stops after choosing the cases, before any rank starts) and
# imports what the command imports.
_GPU = "needs CUDA GPUs and Transformer Engine"
_CATALOGUE = "the whole catalogue, over 60 s on two cores"
DRY = {
    "./scripts/run": ("./scripts/run --list", _CATALOGUE),
    "./scripts/test": ("./scripts/test --co -q tests/test_readme.py", "the whole test suite, 7 to 10 minutes"),
    "./scripts/run --sut emulated-buggy --reuse asymmetric --json r.json --junit r.xml":
        ("./scripts/run --sut emulated-buggy --reuse asymmetric --json r.json --junit r.xml --list", _CATALOGUE),
    "./scripts/run --launcher torchrun": ("./scripts/run --launcher torchrun --list", _CATALOGUE),
    "./scripts/run --launcher mpirun": ("./scripts/run --launcher mpirun --list", _CATALOGUE),
    "./scripts/run --launcher inproc": ("./scripts/run --launcher inproc --list", _CATALOGUE),
    "./scripts/run --case-file my-cases.json": ("./scripts/run --help", "needs the reader's own case file"),
    "torchrun --standalone --nproc-per-node 2 --log-dir agent -m harness run --json r.json":
        ("torchrun --standalone --nproc-per-node 2 --log-dir agent -m harness run --json r.json --list", _CATALOGUE),
    "mpirun -np 2 python -m harness run --json r.json": ("mpirun -np 2 python -m harness run --json r.json --list",
                                                         _CATALOGUE),
    "pytest cases/ --sut emulated-buggy --reuse asymmetric":
        ("pytest cases/ --sut emulated-buggy --reuse asymmetric --co -q", "every case and the real-bug reproducers, "
                                                                          "over 60 s"),
    "./scripts/run --sut te": ("./scripts/run --sut te --help", _GPU),
    "./scripts/run --sut te-buggy --reuse asymmetric": ("./scripts/run --sut te-buggy --reuse asymmetric --help", _GPU),
    "./scripts/run --sut te --cases userbuffers": ("./scripts/run --sut te --cases userbuffers --help", _GPU),
    "./scripts/run --sut te1 --world-size 2": ("./scripts/run --sut te1 --world-size 2 --help", _GPU),
    "./scripts/run --world-size 40 --oversubscribe": ("./scripts/run --world-size 40 --oversubscribe --list",
                                                      "40 ranks on this machine, over 60 s"),
    "python -m harness stress --minutes 30 --out s1": ("python -m harness stress --help", "30 minutes"),
    "python -m harness stress --groups auto --out s2": ("python -m harness stress --help", "until stopped"),
    "python -m harness stress --shard 2/4 --seed 7 --out s3": ("python -m harness stress --help", "until stopped"),
    "python -m harness stress merge merged s3": ("python -m harness stress merge --help",
                                                 "needs the shards' folders, which the runs above (dry) do not write"),
    "PYTHONPATH=$PWD python3 -m harness run --sut te1 --world-size 1 --deadline 60 --json te1.json":
        ("PYTHONPATH=$PWD python3 -m harness run --help", _GPU + " 1.x, in the system python"),
    "PYTHONPATH=$PWD python3 -m harness run --sut te1 --world-size 1 --deadline 60 --reuse symmetric --json te1-reuse.json":
        ("PYTHONPATH=$PWD python3 -m harness run --help", _GPU + " 1.x, in the system python"),
    "OUT=out scripts/te1-validate": ("OUT=out scripts/te1-validate --dry-run", _GPU + " 1.x"),
    "./scripts/run --sut te --reuse off --json old.json": ("./scripts/run --sut te --reuse off --help", _GPU),
    "./scripts/run --sut te --reuse off --json new.json": ("./scripts/run --sut te --reuse off --help", _GPU),
    "python -m harness diff old.json new.json --json diff.json":
        ("python -m harness diff --help", "needs the two TE runs' reports above"),
    "torchrun --nnodes 2 --node-rank 0 --nproc-per-node 8 --master-addr node0 --master-port 29500 --log-dir agent "
    "-m harness run --json r.json": ("torchrun --help", "two hosts"),
    "torchrun --nnodes 2 --node-rank 1 --nproc-per-node 8 --master-addr node0 --master-port 29500 --log-dir agent "
    "-m harness run --json r.json": ("torchrun --help", "two hosts"),
    "mpirun -np 16 -hosts node0,node1 python -m harness run --json r.json": ("mpirun --help", "two hosts"),
    "python -m harness bench --json bench.json": ("python -m harness bench --help", "about 100 s or more"),
    "pytest -p harness.sentinel --sentinel-scan PKG[,PKG...]":
        ("pytest -p harness.sentinel --help", "PKG stands for the package the reader's own tests test"),
}


def blocks(text: str) -> list[tuple[str, list[str], int]]:
    """Every fenced block: (info string, its lines, the line number of its opening fence)."""
    found, info, lines, start = [], None, [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if info is None:
                info, lines, start = line[3:].strip(), [], number
            else:
                found.append((info, lines, start))
                info = None
        elif info is not None:
            lines.append(line)
    return found


def commands(lines: list[str]) -> list[str]:
    """The commands of a command block, as a reader would type them."""
    out, pending = [], ""
    for line in lines:
        line = re.sub(r"\s+#\s.*$", "", line).rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        out.append(" ".join((pending + line.strip()).split()))
        pending = ""
    return out


def normalise(line: str) -> str:
    """What changes from run to run: a case's seconds, its reuse count, an object's id."""
    line = re.sub(r"\d+\.\d+s\b", "<t>s", line)
    line = re.sub(r"reuse=\d+", "reuse=<n>", line)
    return re.sub(r"0x[0-9a-f]+", "<id>", line).rstrip()


def readme_items():
    """(test id, kind, commands, expected lines) for every block of commands of the README: the
    commands of one block run one after the other in one copy (a later one may read what an
    earlier one wrote)."""
    items = []
    for info, lines, start in blocks(open(README).read()):
        if info or not lines:
            continue
        if lines[0].startswith("$ "):
            items.append((f"README.md:{start}-example", "example", [lines[0][2:].strip()], lines[1:]))
        elif commands(lines):
            items.append((f"README.md:{start}", "commands", commands(lines), []))
    return items


def setup_line() -> str:
    """The README's set-up line: the first command of its first block."""
    info, lines, _ = blocks(open(README).read())[0]
    return commands(lines)[0]


def readme_files() -> dict[str, str]:
    """The files the README has its reader create: ```python blocks opening with ``# NAME.py``."""
    files = {}
    for info, lines, _ in blocks(open(README).read()):
        match = re.match(r"#\s*(\w+\.py)\b", lines[0]) if info == "python" and lines else None
        if match:
            files[match.group(1)] = "\n".join(lines) + "\n"
    return files


def fresh_copy(dest) -> str:
    """What a fresh clone of this checkout holds, at ``dest``, with this test's .venv in it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = os.path.join(REPO, rel)
        if not os.path.isfile(src):
            continue                        # deleted in the working tree
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))
    os.symlink(sys.prefix, os.path.join(dest, ".venv"))
    for name, text in readme_files().items():
        with open(os.path.join(dest, name), "w") as fh:
            fh.write(text)
    return str(dest)


def plain_shell_env() -> dict:
    """This environment without any virtual environment: no VIRTUAL_ENV, no venv's bin on the PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    bins = {os.path.realpath(os.path.join(sys.prefix, "bin"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.realpath(p) not in bins and not os.path.exists(
                                      os.path.join(p, "activate")))
    return env


def empty_folders(root: str) -> list[str]:
    return [os.path.relpath(folder, root) for folder, dirs, files in os.walk(root) if not dirs and not files]


def run_as_reader(copy: str, command: str) -> subprocess.CompletedProcess:
    script = f"{{ {setup_line()}; }} >/dev/null\n{command}\n"
    return subprocess.run(["bash", "-c", script], cwd=copy, env=plain_shell_env(), capture_output=True, text=True,
                          timeout=HANG_GUARD_S, stdin=subprocess.DEVNULL)


def check_ran(proc: subprocess.CompletedProcess, command: str) -> str:
    output = proc.stdout + proc.stderr
    assert "No module named" not in output, f"{command}:\n{output[-4000:]}"
    assert "Traceback (most recent call last)" not in output, f"{command}:\n{output[-4000:]}"
    assert proc.returncode in (0, 1), f"{command}: exit status {proc.returncode}\n{output[-4000:]}"
    return output


ITEMS = readme_items()


@pytest.mark.slow
@pytest.mark.parametrize("kind,block,expected", [item[1:] for item in ITEMS], ids=[item[0] for item in ITEMS])
def test_the_readme_commands_run_as_written(kind, block, expected, tmp_path):
    copy = fresh_copy(tmp_path / "checkout")
    folders_before = empty_folders(copy)
    for command in block:
        dry = DRY.get(command)
        output = check_ran(run_as_reader(copy, dry[0] if dry else command), command)
    left = sorted(set(empty_folders(copy)) - set(folders_before))
    assert left == [], f"the commands left empty folders behind: {left}"
    if kind == "example":
        lines = [normalise(line) for line in output.splitlines()]
        at = 0
        for want in expected:
            if want.strip() in ("", "..."):
                continue
            want = normalise(want)
            assert want in lines[at:], f"{command}: the README shows\n  {want}\nwhich the run did not print:\n{output}"
            at = lines.index(want, at) + 1


def test_every_dry_command_is_in_the_readme():
    """A command renamed in the README is not left behind in DRY, silently running nothing."""
    assert set(DRY) <= {command for item in ITEMS for command in item[2]}


def test_the_readme_is_read_into_commands():
    """The extraction finds the blocks it must: the set-up line, the examples, the files."""
    assert setup_line() == "./scripts/setup && . .venv/bin/activate"
    assert {"mystack.py", "minimal.py"} <= set(readme_files())
    assert any(kind == "example" for _, kind, _, _ in ITEMS)
    assert "python -m harness scan harness/stacks" in {command for item in ITEMS for command in item[2]}


def test_a_command_that_cannot_import_or_raises_fails_the_check():
    for output, status in (("ModuleNotFoundError: No module named 'torch'\n", 1),
                           ("Traceback (most recent call last):\n  ...\nValueError: x\n", 1), ("error: bad\n", 2)):
        with pytest.raises(AssertionError):
            check_ran(subprocess.CompletedProcess([], status, output, ""), "cmd")
    assert check_ran(subprocess.CompletedProcess([], 1, "0 passed, 1 failed\n", ""), "cmd")


def test_the_plain_shell_has_no_virtual_environment(tmp_path):
    """Without the set-up line, the venv's commands are not there: what the set-up line is for."""
    proc = subprocess.run(["bash", "-c", "command -v torchrun || command -v mpirun || echo none; echo ${VIRTUAL_ENV:-unset}"],
                          env=plain_shell_env(), capture_output=True, text=True, cwd=tmp_path)
    assert proc.stdout.split() == ["none", "unset"], proc.stdout


def test_normalise_drops_only_what_changes_from_run_to_run():
    assert normalise("FAIL  x  (0.06s reuse=1)  [id 0x7f00ab]") == normalise("FAIL  x  (1.50s reuse=2)  [id 0x1]")
    assert normalise("stack.py:56 build") != normalise("stack.py:61 build")
