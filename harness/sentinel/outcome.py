"""``python -m harness.sentinel.outcome NAME LOG``: one run of a suite under the sentinel, in a line.

Reads a pytest log (each line may start with a timestamp, as ``scripts/te1-validate`` writes
them) and prints: the outcome counts, how many tests the sentinel failed, the registries its
findings name, what was watched, and the first finding. Exit status 0, or 2 when LOG cannot be read.
"""

from __future__ import annotations

import re
import sys

_STAMP = re.compile(r"^\s*\d+\.\d+ ")
_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
_FINDING = re.compile(r"^\S+::\S+: (\S+) ")


def outcome(name: str, lines: list[str]) -> str:
    lines = [_STAMP.sub("", line.rstrip("\n"), count=1) for line in lines]
    final = next((line for line in reversed(lines) if _COUNTS.search(line) and " in " in line), "")
    counts = ", ".join(f"{n} {w}" for n, w in _COUNTS.findall(final)) or "no outcome line (did pytest finish?)"
    failed_by_sentinel = sum(1 for line in lines if line.startswith("ERROR ") and "Failed: sentinel:" in line)
    watched = next((line.split(": ", 2)[-1] for line in lines if line.startswith("sentinel: watching")), "nothing")
    findings = [line for line in lines if _FINDING.match(line) and " -> " in line]
    named = sorted({_FINDING.match(line).group(1) for line in findings})
    scanned = [line.removeprefix("sentinel: ") for line in lines if line.startswith("sentinel: scanned")]
    text = (f"{name}: {counts}; {failed_by_sentinel} test(s) failed by the sentinel, "
            f"{len(findings)} finding(s) naming {', '.join(named) or 'no registry'}; watched: {watched}")
    if scanned:
        text += "\n  " + "\n  ".join(scanned)
    if findings:
        text += f"\n  first: {findings[0]}"
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m harness.sentinel.outcome NAME LOG", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError as error:
        print(f"harness.sentinel.outcome: cannot read {argv[1]}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(outcome(argv[0], lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
