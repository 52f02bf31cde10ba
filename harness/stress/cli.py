"""``python -m harness stress``: randomised cases for M minutes, failures shrunk, reports in DIR.

``stress --shard I/N`` runs shard I of N of the seed's batches, ``--groups N|auto`` runs N rank
groups side by side (:mod:`harness.stress.groups`), and ``stress merge OUT DIR...`` makes one
report of many folders (:mod:`harness.stress.merge`). Every refusal happens before anything is
written or started.

Exit codes: 0 no failure, 1 failures found (each with a checked repro command), 2 bad input
or an environment that cannot run the stack, 130 interrupted (the reports are still written).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys

from harness.errors import OneLineParser, UsageError
from harness.stress.streams import Stream, group_stream, parse_shard


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


def _checked(parse):
    """An argparse type from a parser that raises UsageError (its message becomes argparse's)."""
    def convert(text):
        try:
            return parse(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def build_parser() -> argparse.ArgumentParser:
    from harness.stress.groups import parse_groups

    from harness.runner.options import Front, add_to_argparse

    p = OneLineParser(prog="python -m harness stress", description=__doc__.splitlines()[0],
                      epilog="python -m harness stress merge OUT DIR... : one report of several stress runs' folders "
                             "(shards of a job array, or groups side by side); merge --help says more")
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
    p.add_argument("--shard", type=_checked(parse_shard), default=None, metavar="I/N",
                   help="run shard I (from 0) of N disjoint case streams of the seed (a job array's task)")
    p.add_argument("--groups", type=_checked(parse_groups), default=1, metavar="N|auto",
                   help="rank groups side by side, each its own stream of cases (default 1; auto: what the "
                        "machine holds)")
    # Given by a --groups run to each of its groups (harness.stress.groups), not by users.
    p.add_argument("--group-of", type=_checked(_group_of), default=None, help=argparse.SUPPRESS)
    p.add_argument("--claims", default=None, help=argparse.SUPPRESS)
    return p


def _group_of(text: str) -> tuple[int, int]:
    """``g/G``: this process is group g of a G-group run."""
    stream = parse_shard(text)
    return stream.index, stream.count


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "merge":
        from harness.stress.merge import main as merge_main

        return merge_main(argv[1:])
    args = build_parser().parse_args(argv)
    from harness.runner.machine import check_machine, check_stack
    from harness.runner.options import Front, config_from_values, options_for
    from harness.stacks import load_stack

    if not 0 <= args.shrink_share <= 1:
        raise UsageError(f"--shrink-share must be between 0 and 1, got {args.shrink_share!r}")
    cfg = config_from_values({o.field: getattr(args, o.field) for o in options_for(Front.STRESS)}, Front.STRESS)
    check_machine(cfg)                               # fail early, before any rank starts
    stack = load_stack(cfg.sut, cfg.sut_options())
    check_stack(cfg, stack)
    seed = cfg.seed
    groups = args.groups
    if args.group_of is None and groups != 1:
        plan = _plan_groups(args, cfg, stack)        # refuses more GPU groups than GPUs, before any start
        groups = plan.groups
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} exists and is not a folder")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {args.out!r} cannot be created: {exc.strerror or exc}") from None
    if not os.access(args.out, os.W_OK):
        raise UsageError(f"--out {args.out!r} is not writable")
    from harness.stress.record import clear_previous

    clear_previous(args.out)
    if args.group_of is None and groups != 1:
        return _run_groups(args, argv, cfg, plan)

    import hypothesis
    import torch

    from harness.stress.progress import Progress
    from harness.stress.claims import FolderClaims, OwnClaims
    from harness.stress.session import StressOptions, StressSession
    from harness.stress.summary import print_summary

    shard = args.shard or Stream()
    group, of = args.group_of or (None, 1)
    stream = group_stream(shard, of, group) if group is not None else shard
    claims = FolderClaims(args.claims, group) if (args.claims and group is not None) else OwnClaims()
    opts = StressOptions(minutes=args.minutes, out_dir=args.out, seed=seed, batch_seconds=args.batch_seconds,
                         shrink_share=args.shrink_share, shrink_per_failure_s=args.shrink_seconds,
                         max_cases=args.max_cases, max_failures=args.max_failures, stream=stream,
                         shard=args.shard, group=group, groups=of)
    extra = {"argv": ["python", "-m", "harness", "stress"] + argv,
             "cwd": os.getcwd(), "host": platform.node(), "python": platform.python_version(),
             "torch": torch.__version__, "hypothesis": hypothesis.__version__}
    where = f", shard {args.shard.text()}" if args.shard is not None else ""
    where += f", group {group} of {of} (batches {stream.index} + {stream.count}*j)" if group is not None else ""
    _banner(cfg, seed, where, args)
    record = StressSession(cfg, opts, Progress(opts.budget_s), config_extra=extra, claims=claims, stack=stack).run()
    report = record.report()
    print_summary(report, args.out)
    if report.interrupted:
        return 130
    return 1 if report.totals.failing_cases else 0


def _banner(cfg, seed: int, where: str, args) -> None:
    """The run's first line on stderr: stack, launcher, world size, seed, ``where`` (its shard,
    group or groups), budget and report folder."""
    print(f"stress: {cfg.sut} on {cfg.launcher} (world size {cfg.world_size}), seed {seed}{where}, "
          f"{args.minutes:g} min, reports in {args.out}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    groups: int
    devices: list          # CUDA_VISIBLE_DEVICES per group (None: as it is)
    max_cases: list        # each group's share of --max-cases (None: no limit)


def _plan_groups(args, cfg, stack) -> GroupPlan:
    """How many groups, and on which GPUs; UsageError (exit 2) for what this machine cannot hold."""
    from harness.runner.machine import check_capacity, cores
    from harness.stress.groups import auto_groups, gpu_sets, split_cases, stack_gpus

    gpus = stack_gpus(stack)
    groups = args.groups
    if groups == "auto":
        groups = auto_groups(cfg.world_size, cores(), len(gpus) if gpus is not None else None)
        gpu_text = f", {len(gpus)} GPU(s)" if gpus is not None else ""
        print(f"--groups auto: {groups} group(s) of {cfg.world_size} rank(s) ({cores()} core(s){gpu_text}: "
              f"a core per rank and one per controller)", flush=True)
    if args.max_cases is not None and groups > args.max_cases:
        groups = args.max_cases       # a group with no case to run would only start ranks
    devices = gpu_sets(groups, cfg.world_size, gpus, cfg.sut)
    if not cfg.oversubscribe and groups > 1:
        from harness.runner.config import Launcher

        if cfg.launcher is not Launcher.INPROC:
            try:
                check_capacity(groups * cfg.world_size)
            except UsageError as exc:
                raise UsageError(f"--groups {groups}: {exc}") from None
    return GroupPlan(groups, devices, split_cases(args.max_cases, groups))


def _run_groups(args, argv: list[str], cfg, plan: GroupPlan) -> int:
    from harness.stress.groups import GroupRun, run_groups
    from harness.stress.merge import merge
    from harness.stress.progress import Progress
    from harness.stress.summary import print_summary

    groups = plan.groups
    shard = args.shard or Stream()
    on = "" if all(d is None for d in plan.devices) else " on GPUs " + " | ".join(plan.devices)
    _banner(cfg, cfg.seed, f", {groups} groups{on}{', shard ' + shard.text() if args.shard else ''}", args)
    run = GroupRun(argv, args.out, groups, cfg.seed, plan.devices, plan.max_cases, args.minutes * 60.0,
                   Progress(args.minutes * 60.0))
    codes = run_groups(run)
    folders = [run.folder(g) for g in range(groups) if os.path.isfile(os.path.join(run.folder(g), "stress.json"))]
    for g, code in enumerate(codes):
        if run.folder(g) not in folders:
            print(f"warning: group {g} wrote no report (exit {code})", file=sys.stderr)
    if not folders:
        raise UsageError(f"no group wrote a report (exit codes {codes})")
    from harness.report.stress_model import StreamInfo

    extra = {"stream": StreamInfo(shard.index, shard.count), "shard": args.shard.text() if args.shard else None,
             "groups": groups, "group": None, "group_devices": plan.devices,
             "argv": ["python", "-m", "harness", "stress"] + argv}
    report = merge(args.out, folders, config_extra=extra, interrupted=run.interrupted)
    print_summary(report, args.out)
    if run.interrupted or any(c == 130 for c in codes):
        return 130
    if any(c == 2 for c in codes):
        return 2
    return 1 if report.totals.failing_cases else 0
