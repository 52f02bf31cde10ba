"""``python -m harness``: run, stress, bench, report, scan, diff.

Each subcommand has its own module, named in :data:`COMMANDS` with its ``main(argv) -> int``.
Exit codes: 0 all passed (``diff``: every case equal), 1 failures found (``diff``: a
difference), 2 bad input or an environment that cannot run what was asked (one line on stderr,
:func:`harness.errors.exit_code`). Results gathered before an error are written, never lost.
"""

from __future__ import annotations

import importlib
import sys

from harness.errors import exit_code

__harness_hidden__ = True

# name -> (module with main(argv), what it does, whether it needs torch)
COMMANDS = {
    "run": ("harness.runner.command", "run cases against a stack", True),
    "stress": ("harness.stress.cli", "randomised nightly stress run (stress merge: one report of several)", True),
    "bench": ("harness.bench.cli", "benchmarks", True),
    "report": ("harness.report.trend", "trend over several stress reports", False),
    "scan": ("harness.scan.cli", "static scan for id()-keyed state", False),
    "diff": ("harness.report.diff", "compare two runs' JSON reports, tensor by tensor", False),
}

USAGE = "usage: python -m harness {" + ",".join(COMMANDS) + "} ..."


def _help() -> str:
    return USAGE + "\n\n" + "\n".join(f"  {name:8} {text}" for name, (_, text, _) in COMMANDS.items())


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_help())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: {USAGE}: unknown command {argv[0]!r}", file=sys.stderr)
        return 2
    module, _, needs_torch = COMMANDS[argv[0]]
    return exit_code(lambda: importlib.import_module(module).main(argv[1:]),
                     needs=("torch",) if needs_torch and "-h" not in argv and "--help" not in argv else ())
