"""Bad input to ``python -m harness run``: one line on stderr, exit status 2, no traceback.

Every invocation is a process of its own, with its own argv, environment and standard streams.
``import torch`` costs seconds here, so instead of paying it once per invocation, one helper
process imports torch and then forks a child per invocation; the child runs the ``harness``
package exactly as ``python -m harness ARGS`` does (``runpy``, ``__main__``), with a deadline
(SIGALRM). One invocation also runs as a plain ``python -m harness`` subprocess, and must give
the same status and output as its forked twin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
DEADLINE_S = 120

# The helper: reads a JSON list of invocations on stdin, answers a JSON list of exit statuses.
FORK_RUNNER = r"""
import json, os, runpy, signal, sys, traceback
import torch, torch.distributed  # noqa: F401  (paid once, before any fork)

requests = json.loads(sys.stdin.read())
pids = []
for req in requests:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(req["deadline"])
            for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(f, fd)
                os.close(f)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            sys.path[:0] = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.argv = ["harness"] + req["argv"]
            try:
                runpy.run_module("harness", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()   # what the interpreter would print for an uncaught exception
                code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    pids.append(pid)
statuses = []
for pid in pids:
    _, status = os.waitpid(pid, 0)
    statuses.append(os.waitstatus_to_exitcode(status))
print(json.dumps(statuses))
"""


def base_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_MPIRUN", "PYTHONPATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-errors")
    paths = {
        "bad_json": folder / "bad.json",
        "unknown_field": folder / "unknown-field.json",
        "unknown_recipe": folder / "unknown-recipe.json",
        "empty_bin": folder / "empty-bin",
        "missing_dir": folder / "no-such-folder",
        "empty_list": folder / "empty-list.json",
        "bad_lr": folder / "bad-lr.json",
        "non_bool": folder / "non-bool.json",
    }
    paths["empty_list"].write_text("[]")
    paths["bad_lr"].write_text(json.dumps({"name": "x", "model": {"dims": [4, 4], "lr": "fast"}}))
    paths["non_bool"].write_text(json.dumps({"name": "x", "model": {"dims": [4, 4], "fp8_params": "no"}}))
    paths["bad_json"].write_text('{"name": "x", "model": {"dims": [4, 4]')
    paths["unknown_field"].write_text(json.dumps({"name": "x", "model": {"dims": [4, 4]}, "colour": "red"}))
    paths["unknown_recipe"].write_text(json.dumps({"name": "x", "model": {"dims": [4, 4], "recipe": {"marginn": 1}}}))
    paths["empty_bin"].mkdir()       # PATH with no mpirun (and nothing else) in it
    # Stacks that cannot be loaded, in a folder of their own put on PYTHONPATH.
    paths["suts"] = folder / "suts"
    paths["suts"].mkdir()
    (paths["suts"] / "bad_suts.py").write_text(
        "def raising():\n    raise RuntimeError('no device for this stack')\n\n\n"
        "class NeedsArguments:\n    def __init__(self, size):\n        self.size = size\n")
    (paths["suts"] / "bad_syntax.py").write_text("def build(self:\n")
    paths["fifo"] = folder / "report.fifo"
    os.mkfifo(paths["fifo"])
    return folder, paths


def invocations(paths) -> dict:
    """name -> (arguments after `run`, environment changes, what the one stderr line must contain)."""
    no_mpirun = {"PATH": str(paths["empty_bin"])}
    suts = {"PYTHONPATH": str(paths["suts"])}
    te_missing = not os.path.isdir(os.path.join(REPO, "harness", "stacks", "te"))
    te_expect = ("cannot import stack module 'harness.stacks.te.stack'" if te_missing else None)
    return {
        "unknown-stack": (["--sut", "no-such-stack"], {}, "unknown stack 'no-such-stack'"),
        "sut-not-importable": (["--sut", "no_such_pkg.mod:attr"], {},
                               "cannot import stack module 'no_such_pkg.mod' for --sut 'no_such_pkg.mod:attr'"),
        "sut-no-attribute": (["--sut", "harness.fp8:no_such_attr"], {}, "has no attribute 'no_such_attr'"),
        "sut-factory-raises": (["--sut", "bad_suts:raising"], suts,
                               "--sut 'bad_suts:raising': making the stack raised RuntimeError: no device for this "
                               "stack (at "),
        "sut-needs-arguments": (["--sut", "bad_suts:NeedsArguments"], suts,
                                "--sut 'bad_suts:NeedsArguments': NeedsArguments needs arguments (size)"),
        "sut-not-a-stack": (["--sut", "json:dumps"], {}, "--sut 'json:dumps': dumps needs arguments (obj)"),
        "sut-not-a-stack-object": (["--sut", "json:JSONEncoder"], {},
                                   "--sut 'json:JSONEncoder' is not a stack: its JSONEncoder lacks name, build,"),
        "sut-syntax-error": (["--sut", "bad_syntax:STACK"], suts,
                             "cannot import stack module 'bad_syntax' for --sut 'bad_syntax:STACK': SyntaxError"),
        "cases-empty": (["--cases", ""], {}, "--cases '' selects nothing"),
        "json-not-a-file": (["--json", str(paths["fifo"])], {}, "exists and is not a regular file"),
        "world-size-0": (["--world-size", "0"], {}, "--world-size must be an integer >= 1, got 0"),
        "world-size-negative": (["--world-size", "-1"], {}, "--world-size must be an integer >= 1, got -1"),
        "deadline-0": (["--deadline", "0"], {}, "--deadline must be > 0"),
        "deadline-negative": (["--deadline", "-5"], {}, "--deadline must be > 0"),
        "deadline-nan": (["--deadline", "nan"], {}, "--deadline must be > 0"),
        # An infinite deadline cannot be waited on (select, timedelta): refused up front.
        "deadline-inf": (["--launcher", "inproc", "--deadline", "inf", "--cases", "repro/hygiene"], {},
                         "--deadline must be > 0"),
        "cases-match-nothing": (["--cases", "no/such-case-anywhere"], {}, "--cases 'no/such-case-anywhere' matches no case"),
        "case-file-invalid-json": (["--case-file", str(paths["bad_json"])], {}, "is not valid JSON"),
        "case-file-unknown-field": (["--case-file", str(paths["unknown_field"])], {}, "unknown case field 'colour'"),
        "case-file-unknown-recipe-field": (["--case-file", str(paths["unknown_recipe"])], {},
                                           "unknown recipe field 'marginn'"),
        "case-file-empty-list": (["--case-file", str(paths["empty_list"])], {},
                                 f"--case-file {str(paths['empty_list'])!r} holds no case"),
        # Model fields that only fail deep inside a run (lr) or are silently taken as true (a
        # string for a flag) are bad input too.
        "case-file-bad-lr": (["--case-file", str(paths["bad_lr"]), "--launcher", "inproc", "--no-isolation"], {},
                             "lr must be a finite number"),
        "case-file-non-bool-flag": (["--case-file", str(paths["non_bool"]), "--launcher", "inproc", "--no-isolation"],
                                    {}, "fp8_params must be true or false"),
        "json-folder-missing": (["--json", str(paths["missing_dir"] / "report.json")], {}, "does not exist"),
        "inproc-world-size-2": (["--launcher", "inproc", "--world-size", "2"], {}, "world size must be 1, got 2"),
        "mpirun-not-on-path": (["--launcher", "mpirun", "--cases", "repro/hygiene"], no_mpirun, "no mpirun on PATH"),
        "reuse-bogus": (["--reuse", "bogus"], {}, "--reuse 'bogus'"),
        "inject-on-emulated": (["--inject", "id-hook"], {}, "--sut 'emulated-patched' takes no --inject"),
        "sut-te": (["--sut", "te"], {}, te_expect),
        "world-size-not-a-number": (["--world-size", "two"], {}, "--world-size: invalid int value: 'two'"),
        "unknown-option": (["--frobnicate"], {}, "unrecognized arguments: --frobnicate"),
        "ub-link-0": (["--ub-link-gbps", "0"], {}, "--ub-link-gbps 0.0: expected a positive number of GB/s"),
        "ub-link-nan": (["--ub-link-gbps", "nan"], {}, "--ub-link-gbps nan: expected a positive number of GB/s"),
        "ub-link-env-bad": ([], {"HARNESS_UB_LINK_GBPS": "fast"}, "HARNESS_UB_LINK_GBPS='fast': expected a number"),
    }


PLAIN = ["mpirun-not-on-path"]     # the one whose outcome depends on the environment (PATH)


@pytest.fixture(scope="module")
def outcomes(files):
    """Every invocation once, in forked children of one torch-importing helper; beside it, the
    PLAIN invocations as ordinary ``python -m harness`` subprocesses. All run concurrently."""
    folder, paths = files
    table = invocations(paths)
    requests = []
    for name, (argv, env_changes, _) in table.items():
        env = base_env()
        env.update(env_changes)
        requests.append({"argv": ["run", *argv], "env": env, "cwd": REPO, "deadline": DEADLINE_S,
                         "stdout": str(folder / f"{name}.out"), "stderr": str(folder / f"{name}.err")})
    plain = {}
    for name in PLAIN:
        argv, env_changes, _ = table[name]
        env = base_env()
        env.update(env_changes)
        plain[name] = subprocess.Popen([PYTHON, "-m", "harness", "run", *argv], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO, env=env)
    try:
        helper = subprocess.run([PYTHON, "-c", FORK_RUNNER], input=json.dumps(requests), capture_output=True,
                                text=True, cwd=REPO, timeout=DEADLINE_S + 60)
        plain_results = {}
        for name, proc in plain.items():
            stdout, stderr = proc.communicate(timeout=DEADLINE_S)
            plain_results[name] = (proc.returncode, stdout, stderr)
    finally:
        for proc in plain.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    assert helper.returncode == 0, helper.stderr[-3000:]
    statuses = json.loads(helper.stdout)
    forked = {}
    for (name, (_, _, expect)), status in zip(table.items(), statuses, strict=True):
        forked[name] = (status, (folder / f"{name}.out").read_text(), (folder / f"{name}.err").read_text(), expect)
    return forked, plain_results


NAMES = ["unknown-stack", "sut-not-importable", "sut-no-attribute", "sut-factory-raises", "sut-needs-arguments",
         "sut-not-a-stack", "sut-not-a-stack-object", "sut-syntax-error", "cases-empty", "json-not-a-file",
         "world-size-0", "world-size-negative",
         "deadline-0", "deadline-negative", "deadline-nan", "deadline-inf", "cases-match-nothing",
         "case-file-invalid-json", "case-file-unknown-field", "case-file-unknown-recipe-field",
         "case-file-empty-list", "case-file-bad-lr", "case-file-non-bool-flag", "json-folder-missing",
         "inproc-world-size-2", "mpirun-not-on-path", "reuse-bogus", "inject-on-emulated", "sut-te",
         "world-size-not-a-number",
         "unknown-option", "ub-link-0", "ub-link-nan", "ub-link-env-bad"]


def check_one_line_error(status: int, stdout: str, stderr: str, expect: str | None) -> None:
    assert status == 2, f"exit status {status}\nstdout: {stdout[-2000:]}\nstderr: {stderr[-2000:]}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"stderr has {len(lines)} lines:\n{stderr[-3000:]}"
    assert lines[0].startswith("error: ")
    if expect is not None:
        assert expect in lines[0]
    assert "Traceback" not in stdout and "Traceback" not in stderr


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_is_one_line_and_exit_2(name, outcomes):
    status, stdout, stderr, expect = outcomes[0][name]
    check_one_line_error(status, stdout, stderr, expect)


def test_every_invocation_is_checked(outcomes):
    assert sorted(NAMES) == sorted(outcomes[0])


def test_sut_te_names_transformer_engine_or_the_missing_module(outcomes):
    # Where harness/stacks/te/ exists, the stack must say that TE (or CUDA) is missing here.
    status, _, stderr, expect = outcomes[0]["sut-te"]
    assert status == 2
    line = stderr.strip()
    if expect is None:
        assert "transformer" in line.lower() or "cuda" in line.lower(), line
    else:
        assert expect in line


def test_json_folder_error_creates_nothing(files, outcomes):
    _, paths = files
    assert outcomes[0]["json-folder-missing"][0] == 2
    assert not paths["missing_dir"].exists()


@pytest.mark.parametrize("name", PLAIN)
def test_plain_subprocess_gives_what_the_forked_child_gave(name, outcomes):
    forked, plain = outcomes
    status, stdout, stderr, expect = forked[name]
    assert plain[name] == (status, stdout, stderr)
    check_one_line_error(*plain[name], expect)
