"""A failure's signature: what makes two failing cases one failure, in a stress run and across runs.

The signature is made of the identity fields the oracle set on the failure
(:class:`harness.oracles.findings.Failure`): its oracle, what went wrong (``kind``, with the
``collective`` where one was issued) and where: the call site (file and function, no line
number) or, for ``hygiene``, the registry that holds a dead id (or what keeps a survivor alive).
Nothing is read from the failure's message, which is for people and may be reworded: two cases
that failed the same way in different processes, on different data or shapes, have one
signature; two registries, two call sites or two oracles are two failures. An ``isolation``
finding that only passes on the run alone's own failure carries that failure's identity
(``passed_on``: its oracle) and has its signature: the bug fired in the run alone as it does in a
shared run, and the two are one failure, shrunk and verified once.

A case's signature is its primary failure's (the first of its ordered failures, whose oracle is
the case's). Called by the stress session for every failing case (a new signature is shrunk
once; later cases with it are counted against it), by the group launcher's claims (two groups
that hit one signature shrink it once) and by ``stress merge`` (failures of several shards with
one signature become one). Pure functions of fields.
"""

from __future__ import annotations

from harness.oracles.findings import SURVIVOR, Failure, Oracle


def signature(failure: Failure) -> str:
    """One line: ``oracle: what @ where``."""
    oracle = failure.passed_on or failure.oracle
    if oracle == Oracle.HYGIENE:
        if failure.kind == SURVIVOR:
            return f"{oracle}: survivor held by {failure.holder or 'unreferenced'}"
        return f"{oracle}: {failure.registry or '?'} {failure.kind}"
    what = failure.kind or "failed"
    if failure.collective:
        what += f" ({failure.collective})"
    return f"{oracle}: {what}" + (f" @ {failure.site}" if failure.site else "")


def primary(report) -> Failure | None:
    """A case report's primary failure (:func:`harness.report.model.verdict` orders them)."""
    return report.failures[0] if report.failures else None


def case_signature(report) -> str | None:
    """The signature of a case report's primary failure; None for a case that did not fail."""
    first = primary(report)
    return signature(first) if first is not None else None


def same_failure(got: Failure | None, oracle: str, wanted: str | None) -> bool:
    """Whether a case whose primary failure is ``got`` is the failure found with ``oracle`` and
    signature ``wanted``: the same signature, or the same oracle where the failure has no
    signature of its own. Used by the shrinker and by the repro's check in a fresh process."""
    if got is None:
        return False
    if wanted in (None, oracle):
        return got.oracle == oracle
    return signature(got) == wanted
