"""``python -m harness stress``: randomised cases for M minutes, failures shrunk, reports in DIR.

Exit codes: 0 no failure, 1 failures found (each with a checked repro command), 2 bad input
or an environment that cannot run the stack, 130 interrupted (the reports are still written).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys

from harness.errors import OneLineParser, UsageError


def _positive(kind, what):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{what} must be > 0, got {text!r}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    from harness.runner.options import Front, add_to_argparse

    p = OneLineParser(prog="python -m harness stress", description=__doc__.splitlines()[0])
    add_to_argparse(p, Front.STRESS)       # the run options a stress run shares with `run`
    p.add_argument("--minutes", type=_positive(float, "--minutes"), default=30.0,
                   help="time budget (default 30); cases stop starting once it is spent")
    p.add_argument("--out", required=True, help="folder for stress.json, junit.xml, index.html, repro-<n>.json")
    p.add_argument("--batch-seconds", type=_positive(float, "--batch-seconds"), default=60.0,
                   help="how long one rank group runs cases before a fresh one takes over (default 60)")
    p.add_argument("--shrink-share", type=float, default=0.25,
                   help="share of the budget that shrinking may use in all (default 0.25)")
    p.add_argument("--shrink-seconds", type=_positive(float, "--shrink-seconds"), default=60.0,
                   help="shrink time per kind of failure at most (default 60)")
    p.add_argument("--max-cases", type=_positive(int, "--max-cases"), default=None,
                   help="stop after this many cases even if time is left")
    p.add_argument("--max-failures", type=_positive(int, "--max-failures"), default=None,
                   help="stop once this many kinds of failure are found, shrunk and checked")
    return p


def _clear_previous(out_dir: str) -> None:
    """Remove what an earlier stress run left in ``out_dir`` (only the files this command writes)."""
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if name in ("stress.json", "junit.xml", "index.html") or (name.startswith("repro-") and name.endswith(".json")):
            os.unlink(path)
        elif name in ("plots", "batches") and os.path.isdir(path):
            shutil.rmtree(path)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from harness.runner.machine import check_machine, check_stack
    from harness.runner.options import Front, config_from_values, options_for
    from harness.stacks import load_stack

    if not 0 <= args.shrink_share <= 1:
        raise UsageError(f"--shrink-share must be between 0 and 1, got {args.shrink_share!r}")
    cfg = config_from_values({o.field: getattr(args, o.field) for o in options_for(Front.STRESS)}, Front.STRESS)
    check_machine(cfg)                               # fail early, before any rank starts
    check_stack(cfg, load_stack(cfg.sut, cfg.sut_options()))
    seed = cfg.seed
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} exists and is not a folder")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {args.out!r} cannot be created: {exc.strerror or exc}") from None
    if not os.access(args.out, os.W_OK):
        raise UsageError(f"--out {args.out!r} is not writable")
    _clear_previous(args.out)

    import hypothesis
    import torch

    from harness.stress.progress import Progress
    from harness.stress.session import StressOptions, StressSession

    opts = StressOptions(minutes=args.minutes, out_dir=args.out, seed=seed, batch_seconds=args.batch_seconds,
                         shrink_share=args.shrink_share, shrink_per_failure_s=args.shrink_seconds,
                         max_cases=args.max_cases, max_failures=args.max_failures)
    extra = {"argv": ["python", "-m", "harness", "stress"] + list(sys.argv[1:] if argv is None else argv),
             "cwd": os.getcwd(), "host": platform.node(), "python": platform.python_version(),
             "torch": torch.__version__, "hypothesis": hypothesis.__version__}
    print(f"stress: {cfg.sut} on {cfg.launcher} (world size {cfg.world_size}), seed {seed}, {args.minutes:g} min, "
          f"reports in {args.out}", file=sys.stderr, flush=True)
    record = StressSession(cfg, opts, Progress(opts.budget_s), config_extra=extra).run()
    print_summary(record)
    if record.interrupted:
        return 130
    return 1 if record.totals()["failing_cases"] else 0


def print_summary(record, stream=None) -> None:
    from harness.stress.record import declaration_lines

    out = stream or sys.stdout
    t = record.totals()
    print(f"\n{t['cases']} cases in {t['batches']} batches, {t['models_built']} models built, {t['reuse_events']} "
          f"reuse events, {t['steps_compared']} steps compared bitwise, {t['cases_per_s']:.2f} cases/s "
          f"({t['elapsed_s']:.0f} s)", file=out)
    by_oracle = ", ".join(f"{o} {n}" for o, n in t["failures_by_oracle"].items()) or "none"
    print(f"{t['failing_cases']} failing cases ({by_oracle}), {t['failures']} distinct failures", file=out)
    for line in declaration_lines(t):
        print(line, file=out)
    if t["reuse_events"] == 0 and t["cases"]:
        print("note: no id was reused in this run, so the id-reuse bug class was not exercised", file=out)
    for f in record.failures:
        repro = f.get("repro") or {}
        state = {True: "reproduces", False: "did NOT reproduce in a fresh process", None: "not checked"}[
            repro.get("verified")]
        print(f"\nfailure #{f['n']} [{f['oracle']}] {f['count']} case{'s' * (f['count'] != 1)}, first "
              f"{f['first_case']}; repro ({repro.get('kind', '?')}, {repro.get('cases', '?')} case"
              f"{'s' * (repro.get('cases') != 1)}, {state}):", file=out)
        print(f"  {repro.get('command', '(none)')}", file=out)
    if record.interrupted:
        print(f"\ninterrupted: {record.interrupted}", file=out)
    print(f"\nreports: {os.path.join(record.out_dir, 'stress.json')}, junit.xml, index.html", file=out)
