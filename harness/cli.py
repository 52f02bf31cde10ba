"""``python -m harness``: run, stress, bench, report, scan, diff.

Each subcommand has its own module: ``run`` is :mod:`harness.runner.command`, ``stress``
:mod:`harness.stress.cli`, ``bench`` :mod:`harness.bench.cli`, ``report``
:mod:`harness.report.trend`, ``scan`` :mod:`harness.scan.cli`, ``diff``
:mod:`harness.report.diff`. Exit codes: 0 all passed (``diff``: every case equal), 1 failures
found (``diff``: a difference), 2 bad input or an environment that cannot run what was asked
(one line on stderr). Results gathered before an error are written, never lost.
"""

from __future__ import annotations

import sys

from harness.errors import HarnessError

__harness_hidden__ = True

COMMANDS = {
    "run": ("harness.runner.command", "run cases against a stack"),
    "stress": ("harness.stress.cli", "randomised nightly stress run"),
    "bench": ("harness.bench.cli", "benchmarks"),
    "report": ("harness.report.trend", "trend over several stress reports"),
    "scan": ("harness.scan.cli", "static scan for id()-keyed state"),
    "diff": ("harness.report.diff", "compare two runs' JSON reports, tensor by tensor"),
}

USAGE = "usage: python -m harness {" + ",".join(COMMANDS) + "} ..."


def _command(name: str):
    if name == "run":
        from harness.runner.command import main
    elif name == "stress":
        from harness.stress.cli import main
    elif name == "bench":
        from harness.bench.cli import main
    elif name == "report":
        from harness.report.trend import main
    elif name == "diff":
        from harness.report.diff import main
    else:
        from harness.scan.cli import main
    return main


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + "\n".join(f"  {name:8} {text}" for name, (_, text) in COMMANDS.items()))
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: {USAGE}: unknown command {argv[0]!r}", file=sys.stderr)
        return 2
    try:
        return _command(argv[0])(argv[1:])
    except HarnessError as exc:       # bad input or an environment that cannot run it: one line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
