"""Figure 3: how long until a known bug turns the run red.

The command is the README's reproducer::

    python -m harness run --sut emulated-buggy --reuse asymmetric --world-size 2 --cases repro/cross-rank

run as a subprocess; the clock starts just before the process is created and stops when the
first ``FAIL`` line appears on its stdout. Runs alternate between the command itself and the
same command through :mod:`harness.bench.probe`, which also reports when the ranks were ready,
so "ranks ready to verdict" comes from the probe runs and "command start to verdict" from all.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from harness.bench.bare import PROJECT_ROOT
from harness.bench.figures import Figure, figure
from harness.errors import HarnessError

RED_ARGS = ["run", "--sut", "emulated-buggy", "--reuse", "asymmetric", "--world-size", "2",
            "--cases", "repro/cross-rank"]
TIMEOUT_S = 120.0


def time_to_red_once(probe: bool) -> dict:
    """One run: seconds from start to the first FAIL line, and (probe) from ranks ready to it."""
    module = "harness.bench.probe" if probe else "harness"
    ready_at = []
    stderr_tail = []

    def read_err(stream):
        for line in stream:
            if line.startswith("BENCH-READY "):
                ready_at.append(float(line.split()[1]))
            else:
                stderr_tail.append(line)
                del stderr_tail[:-20]

    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", module, *RED_ARGS], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    err = threading.Thread(target=read_err, args=(proc.stderr,), daemon=True)
    err.start()
    red_at = None
    out_tail = []
    timer = threading.Timer(TIMEOUT_S, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            if red_at is None and line.startswith("FAIL"):
                red_at = time.monotonic()
            out_tail.append(line)
        proc.wait(timeout=30)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    err.join(timeout=5)
    if red_at is None:
        raise HarnessError(f"time_to_red: `python -m {module} {' '.join(RED_ARGS)}` printed no FAIL line "
                           f"(exit {proc.returncode}):\n{''.join(out_tail[-10:])}{''.join(stderr_tail[-10:])}")
    return {"total_s": red_at - t0, "ready_to_red_s": (red_at - ready_at[0]) if ready_at else None,
            "exit_s": time.monotonic() - t0, "rc": proc.returncode, "probe": probe}


def time_to_red_figures(repeats: int = 4, log=print) -> list[Figure]:
    runs = []
    for i in range(repeats):
        run = time_to_red_once(probe=(i % 2 == 1) or repeats == 1)
        runs.append(run)
        log(f"  run {i + 1}/{repeats}{' (probe)' if run['probe'] else ''}: FAIL after {run['total_s']:.2f} s"
            + (f", {run['ready_to_red_s']:.2f} s after ranks were ready" if run["ready_to_red_s"] is not None else ""))
    command = "python -m harness " + " ".join(RED_ARGS)
    total = figure("time_to_red", [r["total_s"] for r in runs], "s", "<= 15",
                   detail={"command": command, "from": "command start", "to": "first FAIL line on stdout",
                           "exit_s": [round(r["exit_s"], 3) for r in runs], "exit_codes": [r["rc"] for r in runs],
                           "probe_runs": sum(r["probe"] for r in runs)})
    ready = figure("time_to_red_from_ready", [r["ready_to_red_s"] for r in runs if r["ready_to_red_s"] is not None],
                   "s", "<= 2", detail={"command": command, "from": "every rank ready (the probe's BENCH-READY line)",
                                        "to": "first FAIL line on stdout"})
    return [total, ready]
