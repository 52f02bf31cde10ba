"""The faults themselves. Each is what a real broken rank does; none is simulated by the runner."""

from __future__ import annotations

import ctypes
import os
import signal
import threading

KINDS = ("raise", "exit", "kill", "hang-collective", "hang-buffer", "spin", "segfault", "thread")


class InjectedFault(RuntimeError):
    pass


def parse(fault: str) -> tuple[str, set[int]]:
    kind, _, ranks = fault.partition("@")
    return kind, {int(r) for r in ranks.split(",")} if ranks else {0}


def trigger(fault: str, rank: int) -> None:
    kind, ranks = parse(fault)
    if kind == "thread":
        # Every rank leaves a non-daemon thread behind; it blocks until the process ends.
        blocker = threading.Event()
        threading.Thread(target=blocker.wait, name="leftover-non-daemon", daemon=False).start()
        return
    if rank not in ranks:
        return
    if kind == "raise":
        raise InjectedFault(f"injected exception on rank {rank}")
    if kind == "exit":
        os._exit(3)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang-collective":
        import torch
        import torch.distributed as dist

        peer = (rank + 1) % dist.get_world_size()
        recv = getattr(dist.recv, "__wrapped__", dist.recv)   # past the ledger's precheck, straight into gloo
        recv(torch.zeros(1), src=peer)   # never sent: blocks until the collective deadline
    if kind == "hang-buffer":
        from harness.faults.buffer_hang import wait_forever_on_flag
        wait_forever_on_flag(rank)
    if kind == "spin":
        while True:   # pure Python: no deadline of torch's applies here
            pass
    if kind == "segfault":
        ctypes.string_at(0)
