"""A ``python -m harness run`` subprocess watched from outside: its output line by line, and what
it left behind once it is gone. Used by the reliability tests and the fault matrix.

Each run gets a marker variable of its own in its environment and a private TMPDIR, so its
leftovers are found without guessing: processes by a scan of /proc/*/environ (the marker, and
``HARNESS_CONTROLLER_PID=<its pid>``), shared-memory segments by ``/dev/shm/fp8h-<its pid>-``,
run folders by ``fp8h-run-*`` in its TMPDIR.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from harness.faultmatrix.leaks import processes_with_env, shm_segments
from harness.runner.cleanup import run_folders

MARK = "FP8H_RUN_MARK"
CASE_MARKS = ("PASS ", "FAIL ", "ERROR ", "SKIP ")
ROOT = Path(__file__).resolve().parents[2]


class HarnessRun:
    """``python -m harness COMMAND ARGS`` in ``cwd`` (``run`` unless told); ``env_extra`` values of
    None remove a variable."""

    def __init__(self, workdir: Path, args: list[str], name: str = "run", env_extra: dict | None = None,
                 cwd: Path | None = None, python: str | None = None, command: str = "run"):
        python = python or sys.executable
        self.token = secrets.token_hex(6)
        self.tmpdir = Path(workdir) / f"{name}-tmp"
        self.tmpdir.mkdir(parents=True)
        self.stderr_path = Path(workdir) / f"{name}.stderr"
        env = dict(os.environ, **{MARK: self.token, "TMPDIR": str(self.tmpdir), "PYTHONUNBUFFERED": "1"})
        env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
        for key, value in (env_extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([python, "-m", "harness", command] + list(args), cwd=cwd or ROOT, env=env,
                                     text=True, stdout=subprocess.PIPE, stderr=self._stderr)
        self.lines: list[str] = []

    def next_case_line(self) -> str | None:
        """Block until the run prints its next case line; None once its output ends. The CLI
        prints a case's line only after the reports on disk hold that case."""
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith(CASE_MARKS):
                return line
        return None

    def next_line_starting(self, prefix: str) -> str | None:
        """Block until the run prints a line starting with ``prefix``; None once its output ends."""
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line
        return None

    def finish(self, timeout: float = 300) -> int:
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        finally:
            self._stderr.close()
        self.lines += rest.splitlines()
        return self.proc.returncode

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def leftovers(self) -> dict[str, list]:
        pid = self.proc.pid
        procs = sorted(set(processes_with_env(MARK, self.token))
                       | set(processes_with_env("HARNESS_CONTROLLER_PID", str(pid))))
        return {"processes": procs, "segments": shm_segments(f"fp8h-{pid}-"), "run_dirs": run_folders(str(self.tmpdir))}
