"""Whether a case exercised what it exists for: a case that needs id reuse and got none.

A case *needs* reuse when reuse is forced for it, by its own spec (``CaseSpec.reuse``, as the
``reuse/*`` cases of the catalogue) or by the run (``--reuse symmetric|asymmetric``): it exists to
show what a stack does when a new object takes a dead one's id. If no rank saw a single reuse
event, its pass says nothing about that path, and the verdict reports it as ``skipped`` with the
reason :func:`not_exercised` gives (``--strict`` makes that a failure). Called by the verdict, with
the case's report gathered over its ranks.
"""

from __future__ import annotations

from harness.case.spec import CaseSpec
from harness.idreuse.morgue import ReusePolicy

FORCING_MODES = ("symmetric", "asymmetric")


def needs_reuse(case: CaseSpec, run_reuse: ReusePolicy) -> bool:
    """True when id reuse is forced for ``case``: by the case itself, else by the run."""
    policy = ReusePolicy.parse(case.reuse) if case.reuse else run_reuse
    return policy.mode in FORCING_MODES


def not_exercised(case: CaseSpec, run_reuse: ReusePolicy, outcome: str, reuse_events: int,
                  reuse_misses: int = 0, shell_misses=()) -> str | None:
    """The reason to report a passing case as skipped, or None.

    ``outcome``, ``reuse_events``, ``reuse_misses``, ``shell_misses`` (lines naming each dead
    model object no shell landed on): the case's report, over every rank. Only a pass is turned
    into a skip: a failure stands whatever reuse it saw. A shell that did not land is a fact of
    the process's heap, not of the stack: the new model's objects of that class were born
    elsewhere, so a pass says nothing of them being born on the dead ones' addresses.
    """
    if outcome != "passed" or not needs_reuse(case, run_reuse):
        return None
    policy = ReusePolicy.parse(case.reuse) if case.reuse else run_reuse
    source = f"the case forces --reuse {policy.text()}" if case.reuse else f"the run forces --reuse {policy.text()}"
    if shell_misses:
        more = f" (and {len(shell_misses) - 1} more)" if len(shell_misses) > 1 else ""
        return f"not forced: {source} but {shell_misses[0]}{more}"
    if reuse_events > 0:
        return None
    missed = f", {reuse_misses} forced reuse(s) did not land" if reuse_misses else ""
    return f"not exercised: {source} but no object took a dead object's id on any rank{missed}"
