"""``python -m harness scan PATH...``: the command line of the id-hazard scan.

Exit status: 0 when nothing fails the scan (no findings, or only safe ones), 1 when a hazard
is found or a file could not be checked, 2 on bad input (one line on stderr). With
``--sentinel-registries`` the command lists and exits 0 (2 on bad input).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from harness.errors import OneLineParser, UsageError
from harness.scan.finding import Severity
from harness.scan.report import format_json, format_text
from harness.scan.scanner import scan_paths
from harness.scan.sentinel_spec import sentinel_registries

PROG = "python -m harness scan"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Find state keyed by the id() of objects that can die (static; nothing is imported).",
        epilog="Suppress a finding with '# id-hazard: ok(<reason>)' on its line.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (searched for *.py)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.add_argument("--hazards-only", action="store_true", help="leave safe findings out of the output")
    parser.add_argument(
        "--sentinel-registries", action="store_true",
        help="print the hazardous registries as --sentinel-registry=MODULE:ATTR lines for pytest -p harness.sentinel",
    )
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        result = scan_paths(args.paths)
    except UsageError as error:
        message = str(error).removeprefix(f"{PROG}: ")
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    if args.sentinel_registries:
        found = sentinel_registries(result.registries, result.class_files, args.paths)
        for spec in found.specs:
            print(f"--sentinel-registry={spec}")
        for line in found.left_out:
            print(f"{PROG}: not watchable: {line}", file=sys.stderr)
        return 0   # a listing, meant for $(...) in scripts that may run under set -e
    shown = [f for f in result.registries if not (args.hazards_only and f.severity is Severity.SAFE)]
    if args.format == "json":
        sys.stdout.write(format_json(shown))
    else:
        sys.stdout.write(format_text(shown))
        print(
            f"{result.count(Severity.HAZARD)} hazard finding(s) on {result.lines(Severity.HAZARD)} line(s), "
            f"{result.count(Severity.ERROR)} error(s), {result.count(Severity.SAFE)} safe, "
            f"{result.suppressed} suppressed in {result.files_scanned} file(s)",
            file=sys.stderr,
        )
    return 1 if result.failed else 0
