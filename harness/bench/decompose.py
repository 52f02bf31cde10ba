"""Where the harness's overhead goes: the same cases with the reference and the precheck on or off.

``python -m harness.bench.decompose [--cases small|cycles] [--rounds N] [--dims D,H,D --batch B]``
runs four persistent groups (everything on; reference off; precheck off; both off) and the bare
loop side by side, block by block, rotating which goes first, and prints each variant's median
wall time per case and its median ratio to the bare block. ``--dims`` and ``--batch`` widen the
small cases' model, to see how each check's share moves as the model work grows. Not one of the
bench's figures: a tool for finding what a figure is made of (docs/log/2026-12-02-bench-profiles.md).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys

from harness.bench.bare import BareGroup
from harness.bench.harnessed import TimedSession, bench_config, expect_pass
from harness.bench.workload import SMALL_BATCH, SMALL_DIMS, cycle_cases, small_cases
from harness.errors import OneLineParser, UsageError


def variants() -> dict:
    on = bench_config()
    return {"default": on,
            "reference off": bench_config(check_reference=False),
            "precheck off": dataclasses.replace(on, precheck=False),
            "both off": dataclasses.replace(bench_config(check_reference=False), precheck=False)}


def decompose(kind: str = "small", rounds: int = 3, log=print, dims: tuple = SMALL_DIMS,
              batch: int = SMALL_BATCH) -> dict[str, list[float]]:
    """Per variant (and ``bare``), the wall time per case of every block, in seconds."""
    cases, block = (small_cases(40, dims, batch), 10) if kind == "small" else (cycle_cases(6, 10), 1)
    configs = variants()
    times: dict[str, list[float]] = {k: [] for k in [*configs, "bare"]}
    bare = BareGroup().start()
    try:
        for r in range(rounds):
            bare.reset()
            sessions = {}
            try:
                for name, cfg in configs.items():
                    sessions[name] = TimedSession(cfg).start()
                for b, lo in enumerate(range(0, len(cases), block)):
                    chunk = cases[lo:lo + block]
                    order = list(times)
                    shift = (b + r) % len(order)
                    for name in order[shift:] + order[:shift]:
                        if name == "bare":
                            wall = max(a["wall_s"] for a in bare.run(chunk).values())
                        else:
                            s = sessions[name]
                            n0 = len(s.case_wall_s)
                            for case in chunk:
                                expect_pass(s.run(case))
                            wall = sum(s.case_wall_s[n0:])
                        times[name].append(wall / len(chunk))
            finally:
                for s in sessions.values():
                    s.close()
            log(f"  round {r + 1}/{rounds} done")
    finally:
        bare.stop()
    return times


def _dims(text: str) -> tuple:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise UsageError(f"--dims takes three positive widths, in,hidden,out (got {text!r})")
    return dims


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m harness.bench.decompose", description=__doc__.splitlines()[0])
    ap.add_argument("--cases", choices=("small", "cycles"), default="small",
                    help="the launch figures' small cases, or stress-like cases of 10 models")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dims", default=",".join(map(str, SMALL_DIMS)),
                    help="the small cases' layer widths, in,hidden,out (default %(default)s)")
    ap.add_argument("--batch", type=int, default=SMALL_BATCH, help="the small cases' batch (default %(default)s)")
    try:
        args = ap.parse_args(argv)
        if args.rounds < 1:
            raise UsageError("--rounds must be >= 1")
        dims = _dims(args.dims)
        if args.batch < 1:
            raise UsageError("--batch must be >= 1")
        if args.cases != "small" and (dims != SMALL_DIMS or args.batch != SMALL_BATCH):
            raise UsageError("--dims and --batch apply to --cases small")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    times = decompose(args.cases, args.rounds, dims=dims, batch=args.batch)
    bare = times["bare"]
    print(f"{'variant':14s} {'ms/case':>8s} {'x bare':>7s}")
    for name, t in times.items():
        ratio = statistics.median(a / b for a, b in zip(t, bare))
        print(f"{name:14s} {statistics.median(t) * 1e3:8.2f} {ratio:7.3f}")
    return 0


if __name__ == "__main__":
    from harness.errors import exit_from

    exit_from(main)
