"""The process's Userbuffers communicators, like TE's ``initialize_ub`` / ``destroy_ub``.

Created on the first tensor-parallel model and kept for the whole launch, across models and
cases (this sharing is what made TE's Userbuffers test fragile), one per name: ``qkv`` (ring
all-gather + GEMM, column-parallel forward), ``proj`` (GEMM + pipelined reduce-scatter,
column-parallel dgrad), ``fc1`` (ring, row-parallel dgrad), ``fc2`` (pipeline, row-parallel
forward). Destroyed by the stack's ``reset()`` and at process exit. The link between ranks is
unmodelled unless ``HARNESS_UB_LINK_GBPS`` gives it a bandwidth (:mod:`harness.comm.link`); the
counters are always staggered (:mod:`harness.comm.stagger`: in each operation one rank holds the
counters it raises, so a consumer that reads before a counter says so is seen at the read). Segment names start with
the controller's prefix (``HARNESS_SHM_PREFIX``), so what a killed rank leaves is swept.
"""

from __future__ import annotations

import atexit
import os
import secrets

import torch.distributed as dist

BUFFER_BYTES = 1 << 20
_STATE: dict = {"comms": None, "group": None, "created": 0}


def communicators(group, deadline_s: float) -> dict:
    from harness.comm import initialize_ub
    from harness.comm.link import LinkModel
    from harness.comm.segments import new_prefix
    from harness.comm.stagger import DEFAULT_HOLD_S, CounterStagger

    ranks = tuple(dist.get_process_group_ranks(group))
    # The communicators belong to one process group: held here (so it cannot die and be
    # replaced by a look-alike) and compared by identity. A recycled group gets new ones.
    current = dist.distributed_c10d._get_default_group()
    comms = _STATE["comms"]
    if comms is not None and _STATE["group"] is current and not any(c.closed for c in comms.values()):
        return comms
    destroy()
    # Every rank must name the segments alike. Ranks create communicators in lock step, so the
    # count of creations so far is common; rank 0 picks the prefix and the others read it.
    store = dist.distributed_c10d._get_default_store()
    _STATE["created"] += 1
    key = f"harness-ub-prefix/{_STATE['created']}"
    if dist.get_rank(group) == 0:
        base = os.environ.get("HARNESS_SHM_PREFIX", "").rstrip("-")
        # Random part: an isolated re-run (a forked child) creates its own while the parent's live.
        store.set(key, f"{base}-ub{secrets.token_hex(3)}" if base else new_prefix())
    prefix = store.get(key).decode()
    _STATE["comms"] = initialize_ub(dist.get_rank(group), len(ranks), store, prefix, BUFFER_BYTES,
                                    deadline_s=deadline_s, link=LinkModel.from_env(),
                                    stagger=CounterStagger(DEFAULT_HOLD_S))
    _STATE["group"] = current
    return _STATE["comms"]


def destroy() -> None:
    from harness.comm import destroy_ub

    comms, _STATE["comms"], _STATE["group"] = _STATE["comms"], None, None
    if comms:
        destroy_ub(comms.values())


atexit.register(destroy)
