"""``python -m harness run``: options, configuration, the run, its reports and its exit code.

Exit codes: 0 all passed, 1 failures found, 2 bad input or an environment that cannot run what
was asked (one line on stderr), 128 + the signal when the run was interrupted. Results gathered
before an error are written, never lost. ``python -m harness`` (:mod:`harness.cli`) dispatches
here; measurements call :func:`main` with their own :class:`~harness.runner.events.RunEvents`.
"""

from __future__ import annotations

import argparse
import os

from harness.errors import OneLineParser, SetupError, UsageError, exit_code
from harness.runner.options import Front, add_to_argparse, config_from_values, options_for

__harness_hidden__ = True


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m harness run", description="run cases against a stack")
    add_to_argparse(parser, Front.RUN)
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    return parser


def build_config(args):
    """The run's configuration from the parsed ``run`` options, checked against this machine, with
    its cases chosen: every bad input is one line (exit 2) before any rank starts."""
    from harness.runner.spmd_env import spmd_environment

    # Checked before torch is imported, so that every rank of an SPMD launch gets here at once.
    spmd = spmd_environment()
    if spmd is not None and args.world_size is not None and args.world_size != spmd.world_size:
        # Every rank sees the same arguments, so every rank stops here: no rank waits for another.
        raise UsageError(f"--world-size {args.world_size} but {spmd.launcher} started {spmd.world_size} ranks")
    values = {o.field: getattr(args, o.field) for o in options_for(Front.RUN)}
    if spmd is not None:
        values["world_size"] = spmd.world_size
        values["launcher"] = values["launcher"] or spmd.launcher
    if values["faults"] and (spmd is not None or values["launcher"] == "inproc"):
        raise UsageError("--faults needs a controller that outlives its ranks: use --launcher spawn, torchrun or "
                         "mpirun from a plain shell (not inside torchrun/mpirun, not inproc)")
    cfg = config_from_values(values, Front.RUN)
    from harness.runner.machine import check_machine, check_stack

    # Fail early, before any rank starts, on a run that cannot fit or a stack that cannot load here.
    check_machine(cfg, spmd=spmd is not None)
    from harness.runner.cases import choose_cases
    from harness.stacks import load_stack

    stack = load_stack(cfg.sut, cfg.sut_options())
    check_stack(cfg, stack)
    return cfg.replace(cases=choose_cases(cfg, stack)), spmd, stack


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


def cmd_run(args, events=None) -> int:
    from harness.report.terminal import case_line, print_summary
    from harness.runner.events import StartupProgress
    from harness.runner.session import run

    from harness.runner.spmd_env import remove_empty_agent_folders, spmd_environment

    if spmd_environment() is not None:      # torchrun's empty folders for this rank go as it ends, however
        import atexit

        atexit.register(remove_empty_agent_folders, dict(os.environ))
    try:
        cfg, spmd, stack = build_config(args)
    except (UsageError, SetupError) as exc:
        from harness.runner.spmd_env import exit_together, spmd_environment

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
        report = run(cfg, on_case, events=events or StartupProgress(), spmd=spmd, stack=stack)
        if report is None:       # an SPMD rank other than 0: rank 0 judges and reports
            return 0
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
    if cfg.faults:
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


def main(argv, events=None) -> int:
    """``python -m harness run ARGV``; ``events``: a :class:`~harness.runner.events.RunEvents`."""
    return exit_code(lambda: cmd_run(build_parser().parse_args(argv), events))
