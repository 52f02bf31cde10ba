"""Repro files and commands, and checking that a command reproduces its failure.

A repro file is a JSON list of case specs, run in order in one group by
``python -m harness run ... --case-file FILE``. The command is checked the way a user would
run it: in a fresh process, with this run's stack, launcher, world size, reuse mode and seed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from harness.files import write_atomic
from harness.report.model import read_case
from harness.report.stress_failure import Check
from harness.runner.config import RunConfig
from harness.stress.signature import primary, same_failure

_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def display_path(path: str) -> str:
    """``path`` relative to the current folder when it lies below it, else absolute."""
    rel = os.path.relpath(os.path.abspath(path))
    return rel if not rel.startswith("..") else os.path.abspath(path)


def write_case_file(path: str, cases: list) -> None:
    from harness.stress.record import publish

    write_atomic(path, json.dumps([c.to_dict() for c in cases], indent=1) + "\n")
    publish(path)


def run_command(cfg: RunConfig, case_file: str) -> list[str]:
    """The ``python -m harness run`` argv that runs ``case_file`` as this stress run would."""
    from harness.runner.judge import repro_argv

    return repro_argv(cfg, case_file=display_path(case_file))


def command_text(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _resolve_prctl():
    try:
        import ctypes

        return ctypes.CDLL(None).prctl
    except Exception:
        return None


# Resolved here, in the parent: the child between fork and exec should not load libraries.
_PRCTL = _resolve_prctl()


def die_with_parent() -> None:
    """In the child: SIGTERM when the stress process dies, so a killed run leaves no controller behind."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


def verify(argv: list[str], case_name: str, oracle: str, timeout_s: float, wanted: str | None = None) -> Check:
    """Run the command once in a fresh process; did ``case_name`` fail (exit 1) as the failure of
    ``oracle`` with signature ``wanted`` did (:func:`~harness.stress.signature.same_failure`)?"""
    fd, json_path = tempfile.mkstemp(prefix="fp8h-verify-", suffix=".json")
    os.close(fd)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable] + argv[1:] + ["--json", json_path]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, preexec_fn=die_with_parent)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        out = _stop(proc)
    except BaseException:
        _stop(proc)
        _unlink(json_path)
        raise
    seconds = time.monotonic() - started
    got = None
    try:
        case = read_case(json_path, case_name)
        got = primary(case) if case is not None else None
    except (OSError, ValueError, TypeError):
        pass
    _unlink(json_path)
    text = out.decode(errors="replace") if out else ""
    reproduced = (not timed_out) and proc.returncode == 1 and same_failure(got, oracle, wanted)
    return Check(reproduced=reproduced, exit_code=proc.returncode, oracle=got.oracle if got is not None else None,
                 timed_out=timed_out, seconds=round(seconds, 2), output_tail=text[-1500:])


def _stop(proc: subprocess.Popen) -> bytes:
    """SIGTERM (the run writes what it has and stops its group), then SIGKILL; each wait bounded."""
    out = b""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            out, _ = proc.communicate(timeout=wait_s)
            return out or b""
        except subprocess.TimeoutExpired:
            continue
    return out


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
