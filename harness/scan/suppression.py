"""Per-line suppressions: ``# id-hazard: ok(<reason>)`` on the flagged line.

The reason is mandatory, because a suppression is a claim ("the object outlives this
entry because ...") that a reviewer must be able to check. A suppression comment that is
not of that form -- no parentheses, empty parentheses, unbalanced -- is reported as
IDK011 and suppresses nothing.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tokenize
from typing import Optional

_MARKER = re.compile(r"id-hazard\s*:\s*")


@dataclasses.dataclass(frozen=True)
class Suppression:
    """A suppression comment; ``reason`` is None when it has none (and so is invalid)."""

    line: int
    col: int
    reason: Optional[str]
    text: str


def read_suppressions(source: bytes) -> dict[int, Suppression]:
    """Suppression comments by line. Comments are found with ``tokenize``, so the marker
    inside a string literal does not count; a file that does not tokenize has none."""
    found: dict[int, Suppression] = {}
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = _MARKER.search(token.string)
        if match is None:
            continue
        line, col = token.start
        found[line] = Suppression(line, col + match.start(), _reason(token.string[match.end():]), token.string.strip())
    return found


def _reason(rest: str) -> Optional[str]:
    """The text inside ``ok(...)`` (nested parentheses allowed), or None."""
    if not rest.startswith("ok("):
        return None
    depth = 0
    for index, char in enumerate(rest[2:], start=2):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                reason = rest[3:index].strip()
                return reason or None
    return None
