"""``python -m harness bench [--json PATH] [--quick]``: the harness's performance figures.

A benchmark, not a test: every figure is a ratio (or share, or time) measured side by side in
this run and repeated, reported as the median with its spread, next to its target. The table
goes to stdout; ``--json`` writes ``{"figures": [...], "meta": {...}}`` after every figure, so
an interrupted run keeps what it measured. Exit code 0 when the bench ran (``--check``: 1 when a
target was missed), 2 on bad input or an environment that cannot run it.

Figures (see docs/performance.md for what each measures and why):
amortization, overhead, time_to_red (+ time_to_red_from_ready), stress_throughput, oracle_cost,
rss_slope (harness_own, emulated_patched), overlap (+ overlap_unmodelled_link).
"""

from __future__ import annotations

import os
import platform
import sys
import time

from harness.errors import OneLineParser, UsageError

GROUPS = ("launch", "time_to_red", "stress_throughput", "oracle_cost", "rss_slope", "overlap")
ALIASES = {"amortization": "launch", "overhead": "launch", "red": "time_to_red", "stress": "stress_throughput",
           "throughput": "stress_throughput", "oracle": "oracle_cost", "rss": "rss_slope", "memory": "rss_slope"}

# Knobs per mode: full stays under 10 minutes on the 2-core development machine, --quick under 2.
FULL = {
    "k": 40, "rounds": 3, "block": 10, "without_reference": True,
    "fresh_per_round": None, "fresh_budget_s": 150.0,          # launch figures
    "red_repeats": 4,                                           # time_to_red (probe runs alternate)
    "stress_cases": 6, "stress_models": 10,                     # stress_throughput
    "rss_cases": 50, "rss_models": 10,                          # rss_slope: 500 cycles
    "overlap_repeats": 3, "overlap_shape": None,                # overlap: the comm benchmark's own shape
}
QUICK = {
    "k": 40, "rounds": 1, "block": 10, "without_reference": False,
    "fresh_per_round": 2, "fresh_budget_s": 30.0,
    "red_repeats": 1,
    "stress_cases": 3, "stress_models": 5,
    "rss_cases": 6, "rss_models": 10,
    "overlap_repeats": 2, "overlap_shape": {"m": 8192, "k": 8192, "n": 8},
}


def parse(argv):
    p = OneLineParser(prog="python -m harness bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    p.add_argument("--quick", action="store_true", help="fewer repeats and cycles (under 2 minutes)")
    p.add_argument("--only", default=None,
                   help=f"comma-separated figures to measure: {', '.join(GROUPS)} (default: all)")
    p.add_argument("--cases", type=int, default=None, help="K, the small cases of the launch figures (default 40)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the launch figures")
    p.add_argument("--repeats", type=int, default=None, help="time_to_red runs and overlap repetitions")
    p.add_argument("--overlap-shape", default=None, help="M,K,N of the overlap benchmark (default: its own)")
    p.add_argument("--check", action="store_true", help="exit 1 when a figure misses its target")
    return p.parse_args(argv)


def _knobs(args) -> dict:
    knobs = dict(QUICK if args.quick else FULL)
    if args.cases is not None:
        if args.cases < 1:
            raise UsageError("--cases must be >= 1")
        knobs["k"] = args.cases
        knobs["block"] = min(knobs["block"], args.cases)
    if args.rounds is not None:
        if args.rounds < 1:
            raise UsageError("--rounds must be >= 1")
        knobs["rounds"] = args.rounds
    if args.repeats is not None:
        if args.repeats < 1:
            raise UsageError("--repeats must be >= 1")
        knobs["red_repeats"] = knobs["overlap_repeats"] = args.repeats
    if args.overlap_shape:
        try:
            m, k, n = (int(x) for x in args.overlap_shape.split(","))
        except ValueError:
            raise UsageError(f"--overlap-shape {args.overlap_shape!r}: expected M,K,N") from None
        knobs["overlap_shape"] = {"m": m, "k": k, "n": n}
    return knobs


def _selected(only: str | None) -> list[str]:
    if not only:
        return list(GROUPS)
    chosen = []
    for name in (s.strip() for s in only.split(",") if s.strip()):
        group = ALIASES.get(name, name)
        if group not in GROUPS:
            raise UsageError(f"--only {name!r}: not a figure; use {', '.join(GROUPS)}")
        if group not in chosen:
            chosen.append(group)
    return [g for g in GROUPS if g in chosen]     # launch first: oracle_cost reuses its groups' results


def _check_writable(path: str) -> None:
    """Refuse a --json path that cannot be written, before anything is measured (torch-free)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"--json {path!r} is a directory; give a file path")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UsageError(f"--json {path!r}: folder {folder!r} does not exist or is not writable")


def main(argv=None) -> int:
    from harness.errors import HarnessError, SetupError

    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = parse(argv)
        knobs = _knobs(args)
        chosen = _selected(args.only)
        if args.json:
            _check_writable(args.json)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from harness.runner.interrupts import Interrupted, interruptible

    try:
        # SIGTERM as SIGINT: the groups of the figure under way are stopped on the way out, and the
        # figures already measured are in the JSON file.
        with interruptible() as signals:
            figures = run_bench(chosen, knobs, args, argv, signals)
    except (SetupError, HarnessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"interrupted ({exc.args[0] if exc.args else 'SIGINT'})", file=sys.stderr)
        return 130
    if args.check and any(f.ok is False for f in figures):
        return 1
    return 0


def run_bench(chosen: list[str], knobs: dict, args, argv: list[str], signals) -> list:
    """Measure the chosen figure groups in order; print the table; write JSON after each group.
    ``signals``: the :func:`~harness.runner.interrupts.interruptible` block's, for the clean-up."""
    from harness.bench.figures import table, write_json

    started = time.monotonic()
    figures: list = []
    meta = {"command": " ".join(["python -m harness bench", *argv]),
            "quick": bool(args.quick), "knobs": knobs, "python": platform.python_version(),
            "cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg())}

    def log(text: str) -> None:
        print(text, flush=True)

    def done(new) -> None:
        figures.extend(new)
        meta["elapsed_s"] = round(time.monotonic() - started, 1)
        meta["loadavg_end"] = list(os.getloadavg())
        if args.json:
            write_json(figures, args.json, meta)

    needs_bare = any(g in chosen for g in ("launch", "stress_throughput", "rss_slope"))
    bare = None
    try:
        if needs_bare:
            from harness.bench.bare import BareGroup
            bare = BareGroup(2).start()
        launch_results = None
        for group in chosen:
            t0 = time.monotonic()
            log(f"{group} ...")
            if group == "launch":
                from harness.bench.launch import launch_figures
                new, extra = launch_figures(bare, knobs["k"], knobs["rounds"], knobs["block"],
                                            knobs["fresh_per_round"], knobs["fresh_budget_s"],
                                            knobs["without_reference"], log=log)
                launch_results = extra["rank_results"]
            elif group == "time_to_red":
                from harness.bench.red import time_to_red_figures
                new = time_to_red_figures(knobs["red_repeats"], log=log)
            elif group == "stress_throughput":
                from harness.bench.throughput import throughput_figure
                fig, _ = throughput_figure(bare, knobs["stress_cases"], knobs["stress_models"], log=log)
                new = [fig]
            elif group == "oracle_cost":
                from harness.bench.oracle_cost import oracle_cost_figure
                results = launch_results if launch_results is not None else _oracle_run(knobs)
                new = [oracle_cost_figure(results)]
            elif group == "rss_slope":
                from harness.bench.memory import memory_figures
                new = memory_figures(bare, knobs["rss_cases"], knobs["rss_models"], log=log)
            else:
                from harness.bench.overlap import overlap_figures
                new = overlap_figures(knobs["overlap_repeats"], knobs["overlap_shape"], log=log)
            log(f"  ({time.monotonic() - t0:.1f} s)")
            done(new)
    finally:
        if bare is not None:
            with signals.deferred():      # a signal now must not leave the bare group's folder behind
                bare.stop()
    print()
    print(table(figures))
    print(f"\n{len(figures)} figures in {time.monotonic() - started:.0f} s"
          f" (load average {meta['loadavg_start'][0]:.1f} at start, {os.getloadavg()[0]:.1f} at end)")
    if args.json:
        print(f"JSON: {args.json}")
    return figures


def _oracle_run(knobs: dict) -> list[dict]:
    """The small cases on one persistent group, for oracle_cost alone (no bare loop needed)."""
    from harness.bench.harnessed import TimedSession, bench_config, expect_pass
    from harness.bench.workload import small_cases

    session = TimedSession(bench_config()).start()
    try:
        for case in small_cases(knobs["k"]):
            expect_pass(session.run(case))
    finally:
        session.close()
    return session.rank_results
