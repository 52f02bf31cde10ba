"""The fault matrix: every fault, repeated, under every launcher -> reported / recycled / left behind.

    python -m harness.faultmatrix --repeat 10 --json fault-matrix.json     # (./scripts/fault-matrix)

For each launcher, one persistent session (this process is the controller, world size 2) runs
each fault case of harness/faults/cases.py followed by its normal case, ``--repeat`` times. Per
fault and launcher it counts the runs where

* reported: the report names the faulty rank with the expected oracle, the cause and (for a
  hang) every rank's Python stack, within the deadline + 10 s of wall time;
* recycled: the group was recycled (a fresh process group in place, or stopped and respawned)
  and the normal case after the fault passed;
* orphans: a stopped group still had a process alive once it was replaced (a scan of
  /proc/*/environ for the group's ``HARNESS_RUN_DIR``);
* leaked: a stopped group left a ``/dev/shm`` segment or its run folder;
* stragglers: processes of the group still alive after the launcher was stopped (terminate,
  then kill), which the controller's last stage then killed by their environment marker (not
  orphans, since they are gone when the stop returns, but a launcher that did not stop its ranks).

The controller-level fault, SIGINT then SIGTERM to a ``python -m harness run`` controller, is
measured on subprocesses (``--signal-runs`` per launcher): reported means exit status 130, a JSON
report that says it was interrupted and holds every finished case, and the exit within the
deadline + 10 s of the signals; recycled does not apply (the run ends).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time

from harness.errors import OneLineParser, UsageError
from harness.files import write_atomic
from harness.faults.cases import EXPECT, check_fault_case, fault_case, normal_case
from harness.faultmatrix.leaks import group_leftovers, processes_with_env
from harness.runner.cleanup import kill_processes_with_env, run_folders
from harness.runner.interrupts import Interrupted, interruptible

WORLD = 2
MARK = "FP8H_MATRIX_MARK"
SIGNAL_ROW = "controller SIGINT+SIGTERM"


def _config(launcher: str, deadline_s: float):
    from harness.runner.config import RunConfig

    return RunConfig(launcher=launcher, world_size=WORLD, isolation=False, deadline_s=deadline_s, reuse="natural")


def _row(kind: str, launcher: str) -> dict:
    return {"fault": kind, "launcher": launcher, "runs": 0, "reported": 0, "recycled": 0, "orphans": 0,
            "leaked": 0, "stragglers": 0, "max_report_s": 0.0, "problems": []}


def _note(row: dict, text: str) -> None:
    if len(row["problems"]) < 5:
        row["problems"].append(text)


def measure_launcher(launcher: str, kinds, repeat: int, deadline_s: float, log=print,
                     out: list | None = None, signals=None) -> list[dict]:
    """The rows of ``launcher``; ``out``: a list they are appended to before anything is measured,
    so that a matrix interrupted half way still has what was counted. ``signals``: the
    :func:`~harness.runner.interrupts.interruptible` block's, so that a signal cannot cut the
    session's close short."""
    from harness.runner.session import open_session

    rows = {kind: _row(kind, launcher) for kind in kinds}
    if out is not None:
        out.extend(rows.values())
    session = open_session(_config(launcher, deadline_s))
    backend = session.backend
    victim = WORLD - 1
    try:
        warm = session.run(normal_case("warm-up"))
        if warm.outcome != "passed":
            raise RuntimeError(f"{launcher}: the warm-up case failed:\n{warm.detail}")
        for rep in range(repeat):
            for kind in kinds:
                row = rows[kind]
                row["runs"] += 1
                if backend.group is None:               # the last normal case failed: start afresh
                    session.run(normal_case("warm-up"))
                old = backend.group
                if old is None:
                    _note(row, f"run {rep}: no working group to inject into")
                    continue
                identity = (old.run_dir, old.shm_prefix, old.generation)
                started = time.monotonic()
                try:
                    report = session.run(fault_case(kind, victim))
                except Exception as exc:   # a harness error is a miss, not the end of the matrix
                    _note(row, f"run {rep}: {type(exc).__name__}: {exc}")
                    backend.restart()
                    continue
                elapsed = time.monotonic() - started
                row["max_report_s"] = max(row["max_report_s"], round(elapsed, 2))
                problems = check_fault_case(report, kind, victim, WORLD)
                if elapsed > deadline_s + 10:
                    problems.append(f"reported after {elapsed:.1f} s")
                if problems:
                    _note(row, f"run {rep}: " + "; ".join(problems))
                else:
                    row["reported"] += 1
                respawned = backend.group is not old
                in_place = not respawned and old.generation == identity[2] + 1
                if respawned:
                    if old.stragglers:      # the launcher left them; stop() killed them by marker
                        row["stragglers"] += 1
                        _note(row, f"run {rep}: killed by marker after the launcher stopped: {old.stragglers}")
                    left = group_leftovers(identity[0], identity[1])
                    if left["processes"]:
                        row["orphans"] += 1
                        _note(row, f"run {rep}: processes left: {left['processes']}")
                    if left["segments"] or left["run_dir"]:
                        row["leaked"] += 1
                        _note(row, f"run {rep}: left {left['segments'] + left['run_dir']}")
                after = session.run(normal_case(kind))
                if (respawned or in_place) and after.outcome == "passed":
                    row["recycled"] += 1
                else:
                    _note(row, f"run {rep}: not recycled (respawned={respawned}, in place={in_place}, "
                               f"next case {after.outcome})")
            log(f"{launcher}: repetition {rep + 1} of {repeat} done")
    finally:
        last = backend.group
        with signals.deferred() if signals is not None else contextlib.nullcontext():
            session.close()
        if last is not None:
            left = group_leftovers(last.run_dir, last.shm_prefix)
            if any(left.values()):
                row = rows[kinds[-1]]
                row["orphans" if left["processes"] else "leaked"] += 1
                _note(row, f"at close: {left}")
    return list(rows.values())


def measure_controller_signals(launcher: str, runs: int, deadline_s: float, workdir: str) -> dict:
    from pathlib import Path

    from harness.faultmatrix.subproc import HarnessRun

    row = _row(SIGNAL_ROW, launcher)
    for i in range(runs):
        row["runs"] += 1
        json_path = Path(workdir) / f"sig-{launcher}-{i}.json"
        run = HarnessRun(Path(workdir), ["--launcher", launcher, "--cases", "delayed/hybrid-h[12]-*", "--deadline",
                                         str(deadline_s), "--json", str(json_path), "--no-isolation"],
                         name=f"sig-{launcher}-{i}")
        if run.next_case_line() is None:
            run.finish()
            _note(row, f"run {i}: no case ran: {run.stderr[-300:]}")
            continue
        signalled = time.monotonic()
        run.proc.send_signal(signal.SIGINT)
        # the SIGTERM during the clean-up, which the controller announces (back to back, the
        # two signals could reach its threads in either order)
        announced = run.next_line_starting("SIGINT received: stopping the ranks") is not None
        if announced:
            run.proc.send_signal(signal.SIGTERM)
        code = run.finish(timeout=120)
        elapsed = time.monotonic() - signalled
        row["max_report_s"] = max(row["max_report_s"], round(elapsed, 2))
        try:
            with open(json_path) as fh:
                report = json.load(fh)
        except (OSError, ValueError) as exc:
            report = {"error": str(exc)}
        good = (announced and code == 128 + signal.SIGINT
                and report.get("interrupted") == "controller received SIGINT"
                and report.get("cases") and elapsed <= deadline_s + 10)
        if good:
            row["reported"] += 1
        else:
            _note(row, f"run {i}: exit {code}, after {elapsed:.1f} s, clean-up announced: {announced}, "
                       f"report {str(report)[:200]}")
        left = run.leftovers()
        if left["processes"]:
            row["orphans"] += 1
            _note(row, f"run {i}: processes left: {left['processes']}")
        if left["segments"] or left["run_dirs"]:
            row["leaked"] += 1
            _note(row, f"run {i}: left {left['segments'] + left['run_dirs']}")
    row["recycled"] = None
    return row


def format_table(rows: list[dict]) -> str:
    head = (f"{'fault':27} {'launcher':9} {'reported':>9} {'recycled':>9} {'orphans':>8} {'leaked':>7} "
            f"{'stragglers':>10} {'max s':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        n = r["runs"]
        recycled = "n/a" if r["recycled"] is None else f"{r['recycled']}/{n}"
        lines.append(f"{r['fault']:27} {r['launcher']:9} {r['reported']:>6}/{n:<2} {recycled:>9} "
                     f"{r['orphans']:>5}/{n:<2} {r['leaked']:>4}/{n:<2} {r['stragglers']:>7}/{n:<2} "
                     f"{r['max_report_s']:>6.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = OneLineParser(prog="python -m harness.faultmatrix", description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=10, help="runs of each fault per launcher")
    p.add_argument("--launchers", default="spawn,torchrun,mpirun")
    p.add_argument("--kinds", default=",".join(EXPECT), help="fault kinds (comma-separated)")
    p.add_argument("--signal-runs", type=int, default=None, help="controller SIGINT+SIGTERM runs per launcher "
                                                                   "(default: --repeat; 0 skips them)")
    p.add_argument("--deadline", type=float, default=3.0)
    p.add_argument("--json", default=None, help="write the matrix here")
    try:
        args = p.parse_args(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in EXPECT]
    if unknown or args.repeat < 1 or args.deadline <= 0:
        print(f"error: unknown kinds {unknown}, or --repeat < 1, or --deadline <= 0", file=sys.stderr)
        return 2
    signal_runs = args.repeat if args.signal_runs is None else args.signal_runs
    token = secrets.token_hex(6)
    os.environ[MARK] = token                  # every rank and launcher started here inherits it
    workdir = tempfile.mkdtemp(prefix="harness-matrix-")
    tempfile.tempdir = workdir                # the controller's run folders land here, to be counted
    started = time.monotonic()
    rows = []
    interrupted = None
    try:
        with interruptible() as signals:
            for launcher in [x for x in args.launchers.split(",") if x]:
                measure_launcher(launcher, kinds, args.repeat, args.deadline,
                                 log=lambda text: print(text, file=sys.stderr, flush=True), out=rows,
                                 signals=signals)
                if signal_runs:
                    rows.append(measure_controller_signals(launcher, signal_runs, args.deadline, workdir))
                print(f"{launcher}: done after {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    except Interrupted as exc:
        # The launcher being measured closed its session on the way out; a controller of the
        # signal rows may still run: whatever carries this matrix's mark is ended below.
        interrupted = str(exc)
    stray = processes_with_env(MARK, token)
    if interrupted:
        kill_processes_with_env(MARK, token)
    dirs_left = run_folders(workdir)
    result = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m harness.faultmatrix " + " ".join(argv if argv is not None else sys.argv[1:]),
        "deadline_s": args.deadline, "repeat": args.repeat, "world_size": WORLD,
        "elapsed_s": round(time.monotonic() - started, 1),
        "stray_processes_at_end": stray, "run_dirs_left_at_end": dirs_left,
        "interrupted": interrupted, "rows": rows,
    }
    if args.json:
        write_atomic(args.json, json.dumps(result, indent=1))
    if not dirs_left:
        shutil.rmtree(workdir, ignore_errors=True)
    print(format_table(rows))
    print(f"stray processes at the end: {len(stray)}; run folders left: {len(dirs_left)}; "
          f"{result['elapsed_s']:.0f} s")
    for r in rows:
        for text in r["problems"]:
            print(f"  {r['fault']} / {r['launcher']}: {text}")
    if interrupted:
        print(f"interrupted ({interrupted}): the rows above hold what was counted before it (the run "
              f"under way then is counted in its row's runs, with no verdict)", file=sys.stderr)
        return 128 + getattr(signal, interrupted, signal.SIGINT)
    ok = not stray and not dirs_left and all(
        r["reported"] == r["runs"] and r["recycled"] in (None, r["runs"]) and not r["orphans"] and not r["leaked"]
        for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    from harness.errors import exit_from

    exit_from(main)
