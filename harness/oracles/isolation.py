"""Isolation equivalence: a case gives the same results alone in a fresh process as after others.

Compared: the result digest (every snapshot's bytes) and the sequence of collectives with their
call sites. Not compared: collective sizes, because the stacks' global amax buffers (like TE's)
are never pruned, so the amax all-reduce grows with every model built before; and runs of the
same collective from the same call site count once, because one reduction point reduces one
buffer per (recipe, group) key ever seen in the process, dead keys included (TE does the same).
Both are the retention report's business. An extra reduction *point* is not: a collective from
a call site the isolated run does not reach at that position fails the oracle.
"""

from __future__ import annotations

from harness.collectives.entry import format_entry, signature


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
    lines = []
    # An isolated run that did not complete (it crashed, hung or diverged) cannot be compared;
    # one that completed with findings of its own (hygiene, say) still can.
    broken = [f for f in alone.failures
              if (f.oracle if hasattr(f, "oracle") else f.get("oracle")) in ("error", "liveness", "cross-rank")]
    if broken:
        first = broken[0].line() if hasattr(broken[0], "line") else str(broken[0])
        return [f"the isolated run of this case failed by itself, so it cannot be compared: {first[:600]}"]
    a_seq, a_entries = _collapsed(alone.collectives)
    s_seq, s_entries = _collapsed(shared.collectives)
    if a_seq != s_seq:
        k = next((i for i, (x, y) in enumerate(zip(s_seq, a_seq)) if x != y), min(len(s_seq), len(a_seq)))
        s_e = s_entries[k] if k < len(s_entries) else None
        a_e = a_entries[k] if k < len(a_entries) else None
        lines.append(f"collective sequence differs from the isolated run at reduction point {k} "
                     f"({len(s_seq)} points after other cases, {len(a_seq)} alone): "
                     f"after other cases {format_entry(s_e)}; alone {format_entry(a_e)}")
    if shared.digest != alone.digest:
        lines.append(f"result digest {shared.digest[:16]} after other cases differs from {alone.digest[:16]} alone")
    return lines
