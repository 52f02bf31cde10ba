"""``python -m harness scan PATH...``: the command line of the id-hazard scan.

What is reported: by default the hazards the scan is sure of (confidence ``high``) and the
files it could not check; ``--all`` adds the hazards of low confidence and the safe findings
(``--all --hazards-only``: every hazard, no safe ones). ``[tool.fp8-harness.scan]`` in the
nearest ``pyproject.toml`` above the paths may set ``confidence = "low"`` (every hazard) and
``exclude`` (:mod:`harness.scan.settings`). ``--baseline FILE`` leaves out the findings the
file holds; ``--write-baseline FILE`` writes the reported ones there.

Exit status: 0 when nothing is reported at the reported confidence (safe findings shown by
``--all`` do not count), 1 when a hazard or a file that could not be checked is reported, 2
on bad input (one line on stderr). ``--sentinel-registries`` lists the hazardous registries
at the reported confidence and exits 0 (2 on bad input); ``--write-baseline`` exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from harness.errors import OneLineParser, UsageError
from harness.scan import baseline, settings
from harness.scan.finding import Confidence
from harness.scan.finding import RegistryFinding, Severity
from harness.scan.fingerprint import fingerprint
from harness.scan.report import format_json, format_text
from harness.scan.sarif import format_sarif
from harness.scan.scanner import scan_paths
from harness.scan.sentinel_spec import sentinel_registries

PROG = "python -m harness scan"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Find state keyed by the id() of objects that can die (static; nothing is imported).",
        epilog="Suppress a finding with '# id-hazard: ok(<reason>)' on its line. Exit: 0 nothing reported, 1 findings, 2 bad input.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or directories (searched for *.py); default: .")
    parser.add_argument("--format", choices=("text", "json", "sarif"), default="text", help="output format (default: text)")
    parser.add_argument("--all", action="store_true",
                        help="also report hazards of low confidence and safe findings (default: hazards of high confidence)")
    parser.add_argument("--hazards-only", action="store_true", help="with --all: leave the safe findings out")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="leave out paths matching GLOB (relative to the current directory; adds to the pyproject.toml's)")
    parser.add_argument("--baseline", metavar="FILE", help="leave out the findings FILE holds; new ones still fail")
    parser.add_argument("--write-baseline", metavar="FILE", help="write the reported findings to FILE as a baseline and exit 0")
    parser.add_argument(
        "--sentinel-registries", action="store_true",
        help="print the hazardous registries as --sentinel-registry=MODULE:ATTR lines for pytest -p harness.sentinel",
    )
    return parser


def reported(findings: list[RegistryFinding], confidence: Confidence, show_safe: bool) -> list[RegistryFinding]:
    """The findings a run reports: hazards at ``confidence`` or above, errors, and the safe
    findings when ``show_safe``."""
    shown = []
    for finding in findings:
        if finding.severity is Severity.SAFE:
            if show_safe:
                shown.append(finding)
        elif finding.severity is Severity.HAZARD and finding.name and confidence is Confidence.HIGH:
            if finding.confidence is Confidence.HIGH:
                shown.append(finding)
        else:
            shown.append(finding)
    return shown


def main(argv: Optional[list[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        paths = args.paths or ["."]
        config = settings.load(paths)
        excluded = list(config.exclude)
        cli_config = settings.ScanSettings(tuple(args.exclude), root=os.getcwd(), source="--exclude")
        skip = lambda path: config.excluded(path) or cli_config.excluded(path)  # noqa: E731
        known = baseline.load(args.baseline) if args.baseline else set()
        result = scan_paths(paths, skip=skip if (excluded or args.exclude) else None)
    except UsageError as error:
        message = str(error).removeprefix(f"{PROG}: ")
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    confidence = Confidence.LOW if args.all else config.confidence
    shown = reported(result.registries, confidence, show_safe=args.all and not args.hazards_only)
    base = os.getcwd()
    quiet = 0
    if known:
        kept = [f for f in shown if fingerprint(f, base) not in known]
        quiet = len(shown) - len(kept)
        shown = kept
    if args.sentinel_registries:
        hazards = [f for f in shown if f.severity is Severity.HAZARD]
        found = sentinel_registries(hazards, result.class_files, paths)
        for spec in found.specs:
            print(f"--sentinel-registry={spec}")
        for line in found.left_out:
            print(f"{PROG}: not watchable: {line}", file=sys.stderr)
        return 0   # a listing, meant for $(...) in scripts that may run under set -e
    if args.write_baseline:
        from harness.files import write_atomic     # standard library only, like the scan

        try:
            write_atomic(args.write_baseline, baseline.dumps(shown, base))
        except OSError as error:
            print(f"{PROG}: error: cannot write baseline {args.write_baseline}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"{len(shown)} finding(s) written to {args.write_baseline}", file=sys.stderr)
        return 0
    if args.format == "json":
        sys.stdout.write(format_json(shown))
    elif args.format == "sarif":
        sys.stdout.write(format_sarif(shown, base))
    else:
        sys.stdout.write(format_text(shown))
    hazards = [f for f in shown if f.severity is Severity.HAZARD]
    errors = sum(1 for f in shown if f.severity is Severity.ERROR)
    low = sum(1 for f in result.registries if f.severity is Severity.HAZARD and f.name and f.confidence is Confidence.LOW)
    hidden = "" if confidence is Confidence.LOW else f", {low} of low confidence not shown (--all)"
    print(
        f"{len(hazards)} hazard finding(s) on {len({line for f in hazards for line in f.lines})} line(s), "
        f"{errors} error(s){hidden}, {result.count(Severity.SAFE)} safe, "
        f"{result.suppressed} suppressed, {quiet} in the baseline, in {result.files_scanned} file(s)",
        file=sys.stderr,
    )
    return 1 if hazards or errors else 0
