"""The collective precheck: ranks compare each collective's shape out of band before issuing it.

Before its k-th collective of a case, a rank publishes (op, group, reduce op, shapes, dtypes)
under position k (in the store, or over the group's sockets: :mod:`harness.collectives.exchange`)
and waits, with the deadline, until every peer of that group has
published its own position k. Any difference, or a peer that ended the case with fewer
collectives, raises :class:`CollectiveMismatch` on the spot: nothing mismatched reaches gloo,
which aborts the process on a size mismatch and waits out its timeout on a kind mismatch
(both measured here on torch 2.13). So a rank whose id bookkeeping fires an extra all-reduce
turns into a prompt cross-rank failure naming position k on every rank, and the group stays
usable for the next case.

With each signature a rank publishes a summary of its stack's registries (each one's keys'
shapes and entries' sizes, :mod:`harness.collectives.registry_digest`); a peer whose registries
differ at position k raises :class:`CollectiveMismatch` naming the registries, both collectives
and the last position where they still agreed: a registry pruned or grown on one rank only is
reported at the first collective after it happened, before any size mismatch it leads to.

Call sites are deliberately not part of the precheck: an extra collective of the *same* shape
passes it, pairs with the peer's next collective (what gloo and NCCL do), and corrupts data the
way the real bug did; the reference oracle then sees the corruption and the ledger comparison
after the case names the call sites. Point-to-point ops are not prechecked.
"""

from __future__ import annotations

import datetime
import json

from harness.collectives.entry import describe, during, shape_signature
from harness.collectives.exchange import ExchangeTimeout, PeerGone, StoreExchange
from harness.collectives.registry_digest import registry_divergence, registry_summary
from harness.errors import DeadlineExceeded, HarnessError, site_of

_POINT_TO_POINT = ("send", "recv")

__harness_hidden__ = True


class CollectiveMismatch(HarnessError):
    pass


class PeerLeftCase(HarnessError):
    """A peer ended the case on an error while this rank waited for its next collective."""


class CollectivePrecheck:
    """One rank's side. Positions are per case; at the case's end a rank writes an end marker at
    the position after its last collective, so a peer waiting there learns it at once.

    ``exchange``: how the messages travel (:mod:`harness.collectives.exchange`); the group's
    store unless given. ``store`` stays the group's store either way (faults coordinate there)."""

    def __init__(self, store, rank: int, deadline_s: float, exchange=None):
        self.store = store
        self.rank = rank
        self.deadline_s = deadline_s
        self.prefix = None
        self.registries = None     # the stack's registries() while a case runs (watch)
        self.agreed = None         # (position, call sites) where the registries last agreed
        self.store.set_timeout(datetime.timedelta(seconds=deadline_s))
        self.exchange = exchange if exchange is not None else StoreExchange(store)

    def begin_case(self, token: str) -> None:
        self.prefix = f"pc/{token}/"
        self.exchange.begin(self.prefix)
        self.agreed = None

    def watch(self, stack) -> None:
        """Publish ``stack``'s registry summary with every collective (the case executor calls
        this when a case starts)."""
        self.registries = stack.registries

    def end_case(self, count: int, failed: bool = False) -> None:
        """``failed``: the case ended here on an exception, so a peer waiting at position ``count``
        must not read it as "this rank has fewer collectives" (that is a cross-rank finding)."""
        if self.prefix is not None:
            try:
                self.exchange.publish(count, self.rank, json.dumps({"end": count, "failed": failed}))
            except ExchangeTimeout:
                pass      # a peer that reads nothing for a whole deadline is reported by its own case
        self.prefix = None

    def __call__(self, entry: dict) -> None:
        if self.prefix is None or entry["op"] in _POINT_TO_POINT:
            return
        k = entry["seq"]
        mine = shape_signature(entry)
        regs = registry_summary(self.registries()) if self.registries is not None else None
        where = entry["sites"][0] if entry["sites"] else ""
        try:
            self.exchange.publish(k, self.rank, json.dumps({"sig": mine, "sites": entry["sites"][:4], "regs": regs,
                                                            "during": entry.get("during")}))
        except ExchangeTimeout:
            raise DeadlineExceeded(f"collective #{k} {describe(mine)}: a peer read nothing of this rank's",
                                   self.deadline_s, where) from None
        for peer in entry["group"]:
            if peer == self.rank:
                continue
            try:
                theirs = json.loads(self.exchange.fetch(k, peer))     # waits up to the deadline
            except ExchangeTimeout:
                raise DeadlineExceeded(f"collective #{k} {describe(mine)}: rank {peer} did not reach it",
                                       self.deadline_s, where) from None
            except PeerGone:
                raise PeerLeftCase(f"rank {peer} is gone (its process ended) while rank {self.rank} waited for "
                                   f"it at collective #{k} {describe(mine)}").identify(
                    "a peer is gone", site_of(where), entry["op"]) from None
            if "end" in theirs and theirs.get("failed"):
                raise PeerLeftCase(f"rank {peer} left the case on an error after {theirs['end']} collectives, "
                                   f"while rank {self.rank} waited for it at collective #{k} {describe(mine)}"
                                   ).identify("a peer left the case on an error", site_of(where), entry["op"])
            if "end" in theirs:
                raise CollectiveMismatch(
                    f"rank {self.rank} issues collective #{k} {describe(mine, entry['sites'][:4])}{during(entry)}, "
                    f"but rank {peer} "
                    f"ended the case after {theirs['end']} collectives: rank {self.rank} has an extra collective"
                ).identify("a rank has an extra collective", site_of(where), entry["op"])
            diverged = registry_divergence(regs, theirs.get("regs"), self.rank, peer)
            if diverged:
                agreed = (f"they agreed at collective #{self.agreed[0]} at {' <- '.join(self.agreed[1]) or '?'}"
                          if self.agreed else "they differ from the case's first collective on")
                raise CollectiveMismatch(
                    f"registries differ between ranks before collective #{k} ({agreed}):\n  "
                    + "\n  ".join(diverged) + f"\n  rank {self.rank}: {describe(mine, entry['sites'][:4])}{during(entry)}"
                    f"\n  rank {peer}: {describe(theirs['sig'], theirs['sites'])}{during(theirs)}"
                ).identify("registries differ between ranks before a collective", site_of(where), entry["op"])
            if theirs["sig"] != mine:
                raise CollectiveMismatch(
                    f"collective #{k} differs between ranks:\n  rank {self.rank}: "
                    f"{describe(mine, entry['sites'][:4])}{during(entry)}\n  "
                    f"rank {peer}: {describe(theirs['sig'], theirs['sites'])}{during(theirs)}"
                ).identify("a collective differs between ranks", site_of(where), entry["op"])
        self.agreed = (k, entry["sites"][:4])
