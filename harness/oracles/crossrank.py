"""Cross-rank agreement: the same collectives in the same order from the same call sites on every
rank, and identical all-reduced scales.
"""

from __future__ import annotations

from harness.collectives.entry import format_entry, signature
from harness.collectives.registry_digest import registry_divergence
from harness.errors import site_of
from harness.oracles.findings import Failure, Oracle


def ledger_truncated(ledgers: dict[int, list[dict]]) -> bool:
    """True when the ledgers agree as far as the shortest goes: some rank simply stopped early."""
    ranks = sorted(ledgers)
    shortest = min(len(ledgers[r]) for r in ranks) if ranks else 0
    for k in range(shortest):
        if len({signature(ledgers[r][k]) for r in ranks}) > 1:
            return False
    return True


def first_divergence(ledgers: dict[int, list[dict]]) -> str | None:
    """None when every rank's ledger matches rank-by-rank, else the first divergent collective."""
    ranks = sorted(ledgers)
    if len(ranks) < 2:
        return None
    length = max(len(ledgers[r]) for r in ranks)
    for k in range(length):
        entries = {r: (ledgers[r][k] if k < len(ledgers[r]) else None) for r in ranks}
        sigs = {r: (signature(e) if e is not None else None) for r, e in entries.items()}
        if len(set(sigs.values())) > 1:
            lines = [f"first divergent collective is #{k}:"]
            for r in ranks:
                lines.append(f"  rank {r}: {format_entry(entries[r])}")
            counts = ", ".join(f"rank {r}: {len(ledgers[r])}" for r in ranks)
            lines.append(f"  collectives issued in this case: {counts}")
            return "\n".join(lines)
    return None


def divergence_failure(ledgers: dict[int, list[dict]]) -> Failure | None:
    """The first divergent collective as a failure: ``liveness`` when a ledger merely stops early
    (it belongs to the rank that died or hung), else ``cross-rank``; its identity is the first
    rank's collective there (its op and innermost call site). None when the ledgers match."""
    text = first_divergence(ledgers)
    if text is None:
        return None
    k = next(k for k in range(max(len(v) for v in ledgers.values()))
             if len({signature(v[k]) if k < len(v) else None for v in ledgers.values()}) > 1)
    entry = next((ledgers[r][k] for r in sorted(ledgers) if k < len(ledgers[r])), None)
    site = site_of(entry["sites"][0]) if entry and entry["sites"] else None
    return Failure(Oracle.LIVENESS if ledger_truncated(ledgers) else Oracle.CROSS_RANK, text,
                   kind="first divergent collective", site=site, collective=entry["op"] if entry else None)


def drift_at_start(summaries: dict[int, dict]) -> list[str]:
    """The registries that already differed between ranks when a case began (each rank's
    ``registry_summary`` taken before the case built anything), one line each, every rank
    against the lowest; empty when they agreed. Called by the judge: such drift was left by
    what ran before the case, not by the case."""
    ranks = sorted(r for r, s in summaries.items() if s)
    if len(ranks) < 2:
        return []
    first = ranks[0]
    lines: list[str] = []
    for peer in ranks[1:]:
        lines += [line for line in registry_divergence(summaries[first], summaries[peer], first, peer)
                  if line not in lines]
    return lines


def scale_disagreement(fingerprints: dict[int, list[str]]) -> str | None:
    """All-reduced metas must be identical on every rank after every step."""
    ranks = sorted(fingerprints)
    if len(ranks) < 2:
        return None
    steps = min(len(v) for v in fingerprints.values())
    for t in range(steps):
        values = {r: fingerprints[r][t] for r in ranks}
        if len(set(values.values())) > 1:
            return (f"all-reduced amax histories and scales differ between ranks after step {t} "
                    f"(fingerprints {', '.join(f'rank {r}: {v}' for r, v in values.items())})")
    return None
