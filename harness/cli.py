"""``python -m harness``: run, stress, bench, report, scan.

Exit codes: 0 all passed, 1 failures found, 2 bad input or an environment that cannot run what
was asked (one line on stderr). Results gathered before an error are written, never lost.
"""

from __future__ import annotations

import argparse
import os
import sys

from harness.errors import HarnessError, SetupError, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, exit 2
        raise UsageError(f"{self.prog}: {message}")


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sut", default="emulated-patched",
                   help="stack under test: emulated-patched, emulated-buggy, te, te-buggy, torchao, or package.module:attr")
    p.add_argument("--inject", default=None, help="inject a bug into a real stack (torchao: id-hook; te: id-hook)")
    p.add_argument("--launcher", default=None, help="spawn (default), torchrun, mpirun, or inproc (world size 1)")
    p.add_argument("--world-size", type=int, default=None, help="ranks per group (default 2; 1 for inproc)")
    p.add_argument("--reuse", default="natural", help="off | natural | symmetric | asymmetric[:RANKS] (id reuse)")
    p.add_argument("--seed", type=int, default=0, help="run seed: changes every case's data")
    p.add_argument("--cases", default=None, help="select cases: a name, substring, glob or keyword expression")
    p.add_argument("--case-file", default=None, help="JSON file with case specs instead of the built-in cases")
    p.add_argument("--deadline", type=float, default=10.0, help="seconds per collective or buffer wait")
    p.add_argument("--ub-link-gbps", type=float, default=None,
                   help="model the Userbuffers link at this many GB/s: a chunk reaches its peer no earlier than "
                        "a link of that bandwidth would deliver it (default: as fast as the copy)")
    p.add_argument("--strict", action="store_true", help="retention findings fail the run")
    p.add_argument("--no-isolation", action="store_true", help="skip the isolated re-run of each case")
    p.add_argument("--reset-between-cases", action="store_true", help="call the stack's reset() before each case")
    p.add_argument("--json", default=None, help="write the JSON report here")
    p.add_argument("--junit", default=None, help="write JUnit XML here")
    p.add_argument("--artifacts", default=None, help="folder for per-rank stack dumps and ledgers of failed cases")
    p.add_argument("--list", action="store_true", help="list the selected cases and exit")
    p.add_argument("--faults", action="store_true",
                   help="run the built-in fault catalogue (harness/faults/cases.py): each injected fault must be "
                        "reported and the normal case after it must pass (--cases selects among them)")


def build_config(args):
    from harness.runner.spmd import spmd_environment

    # Checked before torch is imported, so that every rank of an SPMD launch gets here at once.
    spmd = spmd_environment()
    launcher = args.launcher or (spmd.launcher if spmd else "spawn")
    world = args.world_size
    if world is None:
        world = spmd.world_size if spmd else (1 if launcher == "inproc" else 2)
    if spmd is not None and world != spmd.world_size:
        # Every rank sees the same arguments, so every rank stops here: no rank waits for another.
        raise UsageError(f"--world-size {world} but {spmd.launcher} started {spmd.world_size} ranks")

    from harness.idreuse.morgue import ReusePolicy
    from harness.runner.case_exec import RunOptions
    from harness.runner.config import RunConfig, resolve_cases
    if args.faults and (spmd is not None or launcher == "inproc"):
        raise UsageError("--faults needs a controller that outlives its ranks: use --launcher spawn, torchrun or "
                         "mpirun from a plain shell (not inside torchrun/mpirun, not inproc)")
    if args.faults and args.case_file:
        raise UsageError("--faults and --case-file both choose the cases: give one of them")
    from harness.comm.link import ENV_LINK_GBPS, LinkModel, positive_gbps

    if args.ub_link_gbps is not None:
        positive_gbps(args.ub_link_gbps, f"--ub-link-gbps {args.ub_link_gbps}")
        # Every rank's stack reads it from its environment (spawned ranks inherit it; under
        # torchrun or mpirun each rank sets it from its own arguments).
        os.environ[ENV_LINK_GBPS] = repr(args.ub_link_gbps)
    LinkModel.from_env()      # a bad HARNESS_UB_LINK_GBPS is refused here, before any rank starts
    options = RunOptions(run_seed=args.seed, reuse=ReusePolicy.parse(args.reuse), strict=args.strict,
                         deadline_s=args.deadline, reset_between_cases=args.reset_between_cases)
    cfg = RunConfig(sut=args.sut, sut_options={"inject": args.inject} if args.inject else {}, launcher=launcher,
                    world_size=world, options=options, case_expr=args.cases, isolation=not args.no_isolation,
                    case_file=args.case_file, json_path=args.json, junit_path=args.junit,
                    artifacts_dir=args.artifacts)
    cfg.validate()
    if spmd is None and launcher != "inproc":
        from harness.runner.launchers import get_launcher

        get_launcher(launcher).check()     # e.g. no mpirun on PATH: one line, before anything starts
    from harness.stacks import load_stack

    # Fail early, before any rank starts, on a stack that cannot load here.
    stack = load_stack(cfg.sut, cfg.sut_options or None)
    if args.faults:
        from harness.case.catalog import select_cases
        from harness.faults.cases import fault_catalogue

        cfg.cases = fault_catalogue(world)
        if args.cases:
            chosen = {c.name for c in select_cases(cfg.cases, args.cases)}
            # a fault case brings its normal case along
            cfg.cases = [c for c in cfg.cases if c.name in chosen or c.name.rsplit("/", 1)[0] in chosen]
            if not cfg.cases:
                raise UsageError(f"--cases {args.cases!r} matches no fault case; `python -m harness run --faults "
                                 f"--list` shows them all")
    else:
        cfg.cases = resolve_cases(args.cases, args.case_file, stack, world)
    from harness.faults.inject import parse as parse_fault

    for case in cfg.cases:
        if case.fault not in ("none", ""):
            parse_fault(case.fault)
    return cfg, spmd


class _ReportFiles:
    """The JSON and JUnit reports, rewritten after every case.

    A path that stops being writable mid-run (folder removed, disk full) does not stop the run:
    the cases go on, each write is tried again, and at the end a report that still cannot be
    written where asked is saved under the temp folder instead, named in the one-line error.
    """

    def __init__(self, json_path: str | None, junit_path: str | None):
        from harness.report.junit import write_junit
        from harness.report.model import write_json

        self.targets = [(flag, path, writer) for flag, path, writer in
                        (("--json", json_path, write_json), ("--junit", junit_path, write_junit)) if path]
        self.failed: dict[str, str] = {}     # flag -> why the last write failed

    def write(self, report) -> None:
        for flag, path, writer in self.targets:
            try:
                writer(report, path)
                self.failed.pop(flag, None)
            except OSError as exc:
                self.failed[flag] = exc.strerror or str(exc)

    def rescue(self, report) -> str | None:
        """Save every report that could not be written; one line saying where, or None."""
        import tempfile

        if not self.failed:
            return None
        parts = []
        for flag, path, writer in self.targets:
            if flag not in self.failed:
                continue
            suffix = ".json" if flag == "--json" else ".xml"
            fd, fallback = tempfile.mkstemp(prefix="harness-report-", suffix=suffix)
            os.close(fd)
            writer(report, fallback)
            parts.append(f"cannot write {flag} {path!r} ({self.failed[flag]}); the report of all "
                         f"{len(report.cases)} cases was saved to {fallback}")
        return "; ".join(parts)


def cmd_run(args) -> int:
    from harness.report.terminal import case_line, print_summary

    try:
        cfg, spmd = build_config(args)
    except (UsageError, SetupError) as exc:
        from harness.runner.spmd import exit_together, spmd_environment

        env = spmd_environment()
        if env is not None:
            exit_together(env, f"error: {exc}", 2)
        raise
    if args.list:
        for c in cfg.cases:
            print(c.name)
        return 0
    printed = [0]
    files = _ReportFiles(cfg.json_path, cfg.junit_path)

    def on_case(report):
        files.write(report)      # first: once a case's line is printed, the reports on disk hold it
        for case in report.cases[printed[0]:]:
            print(case_line(case), flush=True)
        printed[0] = len(report.cases)

    report = None
    try:
        if spmd is not None:
            from harness.runner.spmd import run_spmd
            report = run_spmd(cfg, spmd, on_case)
            if spmd.rank != 0:
                return 0 if report is None or not any(c.outcome != "passed" for c in report.cases) else 1
        elif cfg.launcher == "inproc":
            from harness.runner.inproc import run_inproc
            report = run_inproc(cfg, on_case)
        else:
            from harness.runner.controller import run_controlled
            report = run_controlled(cfg, on_case)
    finally:
        if report is not None:
            files.write(report)
    print_summary(report)
    if cfg.json_path and "--json" not in files.failed:
        print(f"JSON report: {cfg.json_path}")
    lost = files.rescue(report)
    if lost:
        raise SetupError(lost)
    if report.interrupted and not report.complete and report.interrupted.startswith("controller received "):
        import signal

        name = report.interrupted.rsplit(" ", 1)[-1]
        return 128 + int(getattr(signal, name, signal.SIGTERM))
    if args.faults:
        from harness.faults.cases import check_fault_run

        problems = check_fault_run(report)
        for line in problems:
            print(f"fault not handled: {line}")
        faults = sum(1 for c in report.cases if not c.name.endswith("/next"))
        print(f"faults: {faults} injected, " + (f"{len(problems)} not handled as they must be" if problems else
                                               "each reported, and each normal case after one passed"))
        return 1 if problems else 0
    s = report.summary()
    return 1 if (s["failed"] or s["errors"]) else 0


def cmd_scan(argv) -> int:
    from harness.scan.cli import main as scan_main
    return scan_main(argv)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "scan":
            return cmd_scan(argv[1:])
        if argv and argv[0] == "stress":
            from harness.stress.cli import main as stress_main
            return stress_main(argv[1:])
        if argv and argv[0] == "bench":
            from harness.bench.cli import main as bench_main
            return bench_main(argv[1:])
        if argv and argv[0] == "report":
            from harness.report.trend import main as report_main
            return report_main(argv[1:])
        parser = _Parser(prog="python -m harness", description=__doc__.splitlines()[0])
        sub = parser.add_subparsers(dest="command")
        run = sub.add_parser("run", help="run cases against a stack")
        _add_run_args(run)
        for name, text in (("scan", "static scan for id()-keyed state"), ("stress", "randomised nightly stress run"),
                           ("bench", "benchmarks"), ("report", "trend over several stress reports")):
            sub.add_parser(name, help=text)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return cmd_run(args)
    except (UsageError, SetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
