"""Isolation equivalence: a case gives the same results alone in a fresh process as after others.

Compared: the result digest (every snapshot's bytes and every tensor ``forward_backward``
returned) and the sequence of collectives with their call sites. Both runs are checked against
the same reference first, so a digest difference says which of the two disagrees with it
(:func:`which_disagrees`), and the run alone's own buffer-integrity and reference findings are
findings of the case (:func:`alone_findings`): a case that is wrong only alone is wrong.

Not compared: collective sizes, because the stacks' global amax buffers (like TE's) are never
pruned, so the amax all-reduce grows with every model built before; and runs of the
same collective from the same call site count once, because one reduction point reduces one
buffer per (recipe, group) key ever seen in the process, dead keys included (TE does the same).
Both are the retention report's business. An extra reduction *point* is not: a collective from
a call site the isolated run does not reach at that position fails the oracle.
"""

from __future__ import annotations

from harness.collectives.entry import format_entry, signature
from harness.errors import site_of
from harness.oracles.findings import Failure, Oracle

# The run alone's own findings that stand for themselves in the case's verdict: what a consumer
# read from a shared buffer, and the records checked against the reference, are as wrong alone
# as after other cases. (Its hygiene is the shared run's to report; what stopped it early, a
# dead peer or a wait past its deadline, is said by the "failed by itself" line.)
ALONE_OWN = (Oracle.BUFFER_INTEGRITY, Oracle.REFERENCE)
ALONE = "in the run alone (this case only, in a fresh process): "
# An isolated run with one of these did not complete: nothing of it can be compared.
ALONE_BROKEN = (Oracle.ERROR, Oracle.LIVENESS, Oracle.CROSS_RANK, Oracle.ISOLATION, Oracle.BUFFER_INTEGRITY)
# How an isolation finding begins that only passes on the run alone's own failure (its line follows).
FAILED_ALONE = "the isolated run of this case failed by itself, so it cannot be compared: "
PASSED_ON_CHARS = 4000     # of the failure passed on, its traceback left out


def _oracle(f) -> str:
    return f.oracle if hasattr(f, "oracle") else f.get("oracle")


def _line(f) -> str:
    return f.line() if hasattr(f, "line") else str(f)


def alone_findings(alone) -> list[Failure]:
    """The run alone's buffer-integrity and reference findings, as findings of the case, each
    marked as the run alone's (:data:`ALONE`), with its rank, model and step. Called by the judge
    after it checked the run alone's records against the reference."""
    out = []
    for f in alone.failures:
        oracle = _oracle(f)
        if oracle not in ALONE_OWN:
            continue
        d = f.to_dict() if hasattr(f, "to_dict") else dict(f)
        out.append(Failure(Oracle(oracle), ALONE + d["detail"], rank=d.get("rank"), step=d.get("step"),
                           model=d.get("model"), **dict(_identity(d), kind=f"in the run alone: {d.get('kind', '')}")))
    return out


def _identity(d: dict) -> dict:
    """The identity fields of a failure given as plain data."""
    return {k: d.get(k) for k in ("kind", "registry", "site", "collective", "holder")}


def _against_reference(run) -> tuple[str, str]:
    """How one run stands against the reference: ``(agrees | disagrees | not checked, the words)``."""
    first = next((f for f in run.failures if _oracle(f) == Oracle.REFERENCE), None)
    if first is not None:
        return "disagrees", f"disagrees with the reference ({_line(first)[:300]})"
    if run.steps_compared:
        return "agrees", f"agrees with the reference ({run.steps_compared} steps compared)"
    return "not checked", "was not checked against the reference"


def passed_on(f) -> str:
    """The run alone's failure as an isolation finding shows it to people: its lines up to its
    traceback, at most :data:`PASSED_ON_CHARS` (its identity travels in the finding's fields)."""
    kept = []
    for line in _line(f).splitlines():
        if line.lstrip().startswith(("Traceback (most recent call last)", 'File "')):
            break
        kept.append(line)
    return "\n".join(kept)[:PASSED_ON_CHARS]


def which_disagrees(shared, alone) -> str:
    """Which of two runs whose digests differ is wrong, by the reference both were checked against."""
    return (f"the run after other cases {_against_reference(shared)[1]}; "
            f"the run alone {_against_reference(alone)[1]}")


def _collapsed(entries: list[dict]) -> tuple[list, list]:
    """Signatures without sizes, consecutive repeats of one signature counted once."""
    sigs, firsts = [], []
    for e in entries:
        sig = signature(e, with_sizes=False)
        if not sigs or sigs[-1] != sig:
            sigs.append(sig)
            firsts.append(e)
    return sigs, firsts


def compare_runs(shared, alone) -> list[str]:
    """Lines describing how the shared run differs from the isolated run (empty when equal)."""
    return [f.detail for f in isolation_failures(shared, alone)]


def isolation_failures(shared, alone, rank: int | None = None) -> list[Failure]:
    """How rank ``rank``'s shared run differs from its isolated run, as isolation failures with
    their identity (empty when equal)."""
    # An isolated run that did not complete (it crashed, hung or diverged, or its process could
    # not run it: the "isolation" finding a rank sends in place of a result) cannot be compared;
    # one that completed with findings of its own (hygiene, say) still can.
    broken = [f for f in alone.failures if _oracle(f) in ALONE_BROKEN]
    own = [f for f in broken if _oracle(f) in ALONE_OWN]
    if own:      # a finding of the case in its own right (alone_findings); what followed from it is not
        return [Failure(Oracle.ISOLATION, f"the isolated run of this case failed by itself ({_oracle(own[0])}, "
                                          f"reported on its own line), so it cannot be compared", rank=rank,
                        kind="the isolated run failed by itself, its finding reported on its own")]
    if broken:
        first = broken[0]
        d = first.to_dict() if hasattr(first, "to_dict") else dict(first)
        # The run alone's own failure: this finding has its identity (harness.stress.signature).
        return [Failure(Oracle.ISOLATION, FAILED_ALONE + passed_on(first), rank=rank, passed_on=str(_oracle(first)),
                        **_identity(d))]
    failures = []
    a_seq, a_entries = _collapsed(alone.collectives)
    s_seq, s_entries = _collapsed(shared.collectives)
    if a_seq != s_seq:
        k = next((i for i, (x, y) in enumerate(zip(s_seq, a_seq)) if x != y), min(len(s_seq), len(a_seq)))
        s_e = s_entries[k] if k < len(s_entries) else None
        a_e = a_entries[k] if k < len(a_entries) else None
        where = s_e or a_e
        failures.append(Failure(
            Oracle.ISOLATION, f"collective sequence differs from the isolated run at reduction point {k} "
                              f"({len(s_seq)} points after other cases, {len(a_seq)} alone): "
                              f"after other cases {format_entry(s_e)}; alone {format_entry(a_e)}", rank=rank,
            kind="collective sequence differs from the isolated run",
            site=site_of(where["sites"][0]) if where and where["sites"] else None,
            collective=where["op"] if where else None))
    if shared.digest != alone.digest:
        states = f"after other cases {_against_reference(shared)[0]}, alone {_against_reference(alone)[0]}"
        failures.append(Failure(
            Oracle.ISOLATION, f"result digest {shared.digest[:16]} after other cases differs from {alone.digest[:16]} "
                              f"alone: {which_disagrees(shared, alone)}", rank=rank,
            kind=f"result digest differs from the isolated run (against the reference: {states})"))
    return failures
