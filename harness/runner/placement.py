"""Where a group's ranks are, and the cases that need them all on one host.

The Userbuffers emulation maps every peer's buffer through shared memory (``/dev/shm``), as
TE's Userbuffers map peers' buffers through CUDA IPC: ranks on different hosts cannot share
one. Such a case is skipped, with the reason, when a multi-node launch (torchrun or mpirun
across nodes) puts its ranks on several hosts. A stack can say which of its cases need one host
with ``needs_one_host(case) -> bool``; by default, every Userbuffers case does.
"""

from __future__ import annotations

import os
import socket

__harness_hidden__ = True


def host_name() -> str:
    """This host's name as the runner compares hosts (``HARNESS_HOSTNAME`` overrides it: tests)."""
    return os.environ.get("HARNESS_HOSTNAME") or socket.gethostname()


def needs_one_host(case, stack=None) -> bool:
    from harness.stacks.hooks import traits

    return traits(stack).one_host(case)


def one_host_reason(case, hosts, stack=None) -> str | None:
    """Why ``case`` cannot run on ranks placed as ``hosts`` (rank -> host name, or a callable
    that returns it, asked only for a case that needs one host); None when it can."""
    if not needs_one_host(case, stack):
        return None
    placed = hosts() if callable(hosts) else hosts
    by_host: dict[str, list[int]] = {}
    for rank, host in sorted(placed.items()):
        by_host.setdefault(host, []).append(rank)
    if len(by_host) <= 1:
        return None
    where = "; ".join(f"{host}: rank{'s' * (len(r) > 1)} {','.join(map(str, r))}" for host, r in by_host.items())
    return (f"needs every rank on one host (its Userbuffers share memory between ranks), but the ranks are on "
            f"{len(by_host)} hosts ({where})")
