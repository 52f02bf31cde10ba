"""Where a run's time goes before its first verdict: ``python -m harness.bench.phases [--json F] -- ARGS``.

Runs ``python -m harness ARGS`` with ``HARNESS_PHASES`` set (:mod:`harness.phases`), so the
controller, every rank and every forked child mark the phases they pass; the first ``FAIL``
line on the command's stdout is marked too. Prints each phase once (its first occurrence), in
time order, as seconds since the command was started, and the gaps between them: import,
stack load and preload (for TE, TE's import), zygote, the first case, its isolated run, the
verdict. The command's own output goes to stderr. ``--until-fail``: the command is interrupted
(SIGINT: it stops its ranks and writes what it has) once its first FAIL line is out. Exit status:
the command's; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from harness.files import write_atomic
from harness.phases import ENV

__harness_hidden__ = True

FIRST_FAIL = "controller: first FAIL line on stdout"


def run_with_phases(args: list[str], timeout_s: float,
                    until_fail: bool = False) -> tuple[int, float, list[tuple[float, int, str]]]:
    """The command's exit status, its start time, and every mark (time, pid, phase) in time order."""
    with tempfile.TemporaryDirectory(prefix="harness-phases-") as tmp:
        path = os.path.join(tmp, "phases.txt")
        env = dict(os.environ, **{ENV: path}, PYTHONUNBUFFERED="1")
        start = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=os.getcwd(), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        marks: list[tuple[float, int, str]] = []
        try:
            for line in proc.stdout:
                if not any(m[2] == FIRST_FAIL for m in marks) and line.startswith("FAIL"):
                    marks.append((time.time(), proc.pid, FIRST_FAIL))
                    if until_fail:
                        proc.send_signal(signal.SIGINT)
                sys.stderr.write(line)
            rc = proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if os.path.exists(path):
            with open(path) as fh:
                for line in fh:
                    when, pid, phase = line.rstrip("\n").split(" ", 2)
                    marks.append((float(when), int(pid), phase))
    return rc, start, sorted(marks)


def breakdown(start: float, marks: list[tuple[float, int, str]]) -> list[dict]:
    """Each phase's first mark: seconds since the start, and since the phase before it."""
    seen, rows, last = set(), [], 0.0
    for when, pid, phase in marks:
        if phase in seen:
            continue
        seen.add(phase)
        at = when - start
        rows.append({"phase": phase, "at_s": round(at, 3), "gap_s": round(at - last, 3), "pid": pid})
        last = at
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.phases", description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the breakdown here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the command may run")
    parser.add_argument("--until-fail", action="store_true", help="interrupt the command after its first FAIL line")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then the arguments of python -m harness")
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if not args:
        print("error: give the harness command after --, e.g. -- run --sut te1 --world-size 1", file=sys.stderr)
        return 2
    rc, start, marks = run_with_phases(args, ns.timeout, ns.until_fail)
    rows = breakdown(start, marks)
    for row in rows:
        print(f"{row['at_s']:9.3f} s  (+{row['gap_s']:7.3f})  {row['phase']}")
    if ns.json:
        write_atomic(ns.json, json.dumps({"command": ["python", "-m", "harness", *args], "exit": rc,
                                          "phases": rows}, indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
