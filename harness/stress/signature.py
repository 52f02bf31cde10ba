"""A failure's signature: what makes two failing cases one failure, in a stress run and across runs.

The signature is the oracle, what went wrong (the detail's first line, reduced), and where: the
call site (file and function of the innermost frame; line numbers blanked) or, for ``hygiene``,
the registry that holds a dead id. Ids, addresses, digests, case names, counts and sizes are
blanked, so two cases that failed the same way in different processes, on different data or
shapes, have one signature; two registries, two call sites or two oracles are two failures.
An ``isolation`` finding that only passes on the run alone's own failure ("failed by itself, so
it cannot be compared: [cross-rank] ...") has that failure's signature: the bug fired in the run
alone as it does in a shared run, and the two are one failure, shrunk and verified once.

Called by the stress session for every failing case (a new signature is shrunk once; later cases
with it are counted against it), by the group launcher's claims (two groups that hit one
signature shrink it once) and by ``stress merge`` (failures of several shards with one
signature become one). Pure functions of text.
"""

from __future__ import annotations

import re

from harness.oracles.isolation import FAILED_ALONE

_PREFIX = re.compile(r"^\[([\w-]+)\]\s*(rank \d+(, model \d+)?:\s*)?")     # group 1: the oracle
_HEX_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_DIGEST = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?(?![\w])")
_SITE = re.compile(r"\bat ([\w./-]+\.py):\d+ ([\w.<>]+)")
_COLLECTIVE = re.compile(r"^\s*rank \d+: \w+ .*?\bat ([\w./-]+\.py):\d+ ([\w.<>]+)")
_REGISTRY = re.compile(r"^([A-Za-z_][\w.]*)")
_STRESS_NAME = re.compile(r"\bstress/b\d+/c\d+\b")
MAX_TEXT = 160


def blank(text: str, names=()) -> str:
    """``text`` with case names, addresses, digests and numbers replaced by placeholders."""
    for name in sorted((n for n in names if n), key=len, reverse=True):
        text = text.replace(name, "<case>")
    text = _STRESS_NAME.sub("<case>", text)
    text = _HEX_ADDRESS.sub("0x#", text)
    text = _DIGEST.sub("<hex>", text)
    text = _NUMBER.sub("N", text)
    return re.sub(r"\s+", " ", text).strip()


def _site(detail_lines: list[str]) -> str:
    """The innermost frame of the first collective a rank issued, else the first call site named."""
    for line in detail_lines[1:]:
        m = _COLLECTIVE.match(line)
        if m:
            return f"{m.group(1)} {m.group(2)}"
    for line in detail_lines:
        m = _SITE.search(line)
        if m:
            return f"{m.group(1)} {m.group(2)}"
    return ""


def _hygiene(headline: str, names) -> str:
    if " is still alive" in headline:
        held = headline.split("(held by ", 1)[1].rstrip(")") if "(held by " in headline else "unreferenced"
        return f"survivor held by {blank(held, names)}"
    m = _REGISTRY.match(headline)
    what = "holds a dead id" if " holds id " in headline else blank(headline.split(" (", 1)[0], names)[:MAX_TEXT]
    return f"{m.group(1) if m else '?'} {what}"


def signature(oracle: str, detail: str, names=()) -> str:
    """One line: ``oracle: what @ where``; ``names`` are case names to blank besides stress's own."""
    lines = [line for line in (detail or "").splitlines() if line.strip()]
    headline = _PREFIX.sub("", lines[0].strip()) if lines else ""
    if oracle == "isolation" and headline.startswith(FAILED_ALONE):
        passed_on = headline[len(FAILED_ALONE):]
        inner = _PREFIX.match(passed_on)
        if inner:
            return signature(inner.group(1), "\n".join([passed_on] + lines[1:]), names)
    if oracle == "hygiene":
        return f"{oracle}: {_hygiene(headline, names)}"
    what = blank(headline.split(" (", 1)[0], names)[:MAX_TEXT]
    where = _site(lines)
    return f"{oracle}: {what}" + (f" @ {where}" if where else "")


def same_failure(got_oracle: str | None, got_detail: str, case_name: str, oracle: str, wanted: str | None) -> bool:
    """Whether a case that failed with ``got_oracle`` (``got_detail``) is the failure found with
    ``oracle`` and signature ``wanted``: the same signature, or the same oracle where the failure
    has no signature of its own. Used by the shrinker and by the repro's check in a fresh process."""
    if not got_oracle:
        return False
    if wanted in (None, oracle):
        return got_oracle == oracle
    return signature(got_oracle, got_detail or "", [case_name]) == wanted
