"""Isolation equivalence: a case gives the same results alone in a fresh process as after others.

Compared: the result digest (every snapshot's bytes) and the sequence of collectives with their
call sites. Not compared: collective sizes, because the stacks' global amax buffers (like TE's)
are never pruned, so the amax all-reduce grows with every model built before; that growth is the
retention report's business, not an isolation failure.
"""

from __future__ import annotations

from harness.runner.ledger import format_entry, signature


def compare_runs(shared, alone) -> list[str]:
    """Lines describing how the shared run differs from the isolated run (empty when equal)."""
    lines = []
    a_seq = [signature(e, with_sizes=False) for e in alone.collectives]
    s_seq = [signature(e, with_sizes=False) for e in shared.collectives]
    if a_seq != s_seq:
        k = next((i for i, (x, y) in enumerate(zip(s_seq, a_seq)) if x != y), min(len(s_seq), len(a_seq)))
        s_e = shared.collectives[k] if k < len(shared.collectives) else None
        a_e = alone.collectives[k] if k < len(alone.collectives) else None
        lines.append(f"collective sequence differs from the isolated run at #{k} "
                     f"({len(s_seq)} collectives after other cases, {len(a_seq)} alone): "
                     f"after other cases {format_entry(s_e)}; alone {format_entry(a_e)}")
    if shared.digest != alone.digest:
        lines.append(f"result digest {shared.digest[:16]} after other cases differs from {alone.digest[:16]} alone")
    return lines
