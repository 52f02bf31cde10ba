"""The faults themselves. Each is what a real broken rank does; none is simulated by the runner.

``trigger(fault, rank)`` runs on every rank at the fault point (see :func:`harness.faults.fault_hook`);
ranks not named in the fault return at once, except for ``kill``, where the peers take part in
making sure they are inside a collective when the victim dies.

Kinds (``KIND@RANKS``, ranks comma-separated, default rank 0):

``raise``            raise an exception out of the case
``exit``             ``os._exit(3)``: the process ends without clean-up
``kill``             SIGKILL while a peer is inside a collective (see :func:`_kill_in_collective`)
``hang-collective``  block in a gloo receive nobody sends, past the ledger and the precheck
``hang-buffer``      spin on a shared-memory flag nobody sets, without deadline (buffer_hang.py)
``spin``             ``while True: pass`` in pure Python
``segfault``         read address 0 (``ctypes.string_at(0)``): SIGSEGV
``thread``           leave a non-daemon thread running after the case
"""

from __future__ import annotations

import ctypes
import datetime
import os
import signal
import sys
import threading
import time

from harness.errors import UsageError

KINDS = ("raise", "exit", "kill", "hang-collective", "hang-buffer", "spin", "segfault", "thread")
_POINT_TO_POINT = ("send", "recv")


class InjectedFault(RuntimeError):
    pass


def parse(fault: str) -> tuple[str, set[int]]:
    """``"kill@1"`` -> ``("kill", {1})``; UsageError (one line) for anything malformed."""
    if not isinstance(fault, str):
        raise UsageError(f"fault must be a string like 'raise@1', got {fault!r}")
    kind, _, ranks = fault.partition("@")
    if kind not in KINDS:
        raise UsageError(f"unknown fault kind {kind!r} in {fault!r}: use one of {', '.join(KINDS)} (as KIND@RANKS)")
    try:
        chosen = {int(r) for r in ranks.split(",")} if ranks else {0}
    except ValueError:
        raise UsageError(f"fault {fault!r}: ranks must be comma-separated integers, e.g. {kind}@0,1") from None
    if any(r < 0 for r in chosen):
        raise UsageError(f"fault {fault!r}: ranks must be >= 0")
    return kind, chosen


def trigger(fault: str, rank: int) -> None:
    kind, ranks = parse(fault)
    if kind == "kill":
        _kill_in_collective(rank, ranks)
        return
    if rank not in ranks:
        return
    if kind == "thread":
        # Blocks until the process ends; the case-end check reports it (oracle "liveness").
        blocker = threading.Event()
        threading.Thread(target=blocker.wait, name=f"leftover-non-daemon-r{rank}", daemon=False).start()
        return
    if kind == "raise":
        raise InjectedFault(f"injected exception on rank {rank}")
    if kind == "exit":
        os._exit(3)
    if kind == "hang-collective":
        _block_in_gloo_recv(rank)
    if kind == "hang-buffer":
        from harness.faults.buffer_hang import wait_forever_on_flag
        wait_forever_on_flag(rank)
    if kind == "spin":
        while True:   # pure Python: no deadline of torch's applies here
            pass
    if kind == "segfault":
        ctypes.string_at(0)


def _block_in_gloo_recv(rank: int) -> None:
    """A receive from the next rank that nobody sends, straight into gloo (past the ledger and its
    precheck), so that what hangs is the collective library itself."""
    import torch
    import torch.distributed as dist

    peer = (rank + 1) % dist.get_world_size()
    recv = getattr(dist.recv, "__wrapped__", dist.recv)
    recv(torch.zeros(1), src=peer)


# --- kill: SIGKILL while the peers are inside a collective -------------------------------------

def _kill_in_collective(rank: int, victims: set[int]) -> None:
    """Arrange for ``victims`` to die by SIGKILL while every other rank is inside a collective.

    How it is made sure, with the case's collective precheck (harness/collectives/precheck.py):

    1. Every rank wraps its precheck for the case's next collective #k.
    2. A victim lets its precheck run (it publishes position k and waits until every peer has
       published the same position), so the peers' prechecks pass too; then, instead of the
       collective, the victim's main thread blocks in a gloo receive nobody sends, and a thread
       of the victim waits for the peers' word that they are inside #k.
    3. A peer, once its precheck passed, starts a thread that watches its own main thread
       (``sys._current_frames``) until that thread's innermost frame is in torch.distributed,
       i.e. the collective call has begun (gloo then waits for the victim's data, which never
       comes); only then does it store ``fault/inside/<rank>`` in the case's precheck keys.
    4. The victim's thread, on seeing every peer's key, sends SIGKILL to its own process.

    So the victim dies blocked in a collective, and each peer is inside collective #k when it
    does. If a peer does not confirm within the deadline, the victim dies anyway (the report
    then shows where the peer was). Without a precheck (one rank, or in-process) the victim is
    killed at once.
    """
    from harness.collectives.ledger import LEDGER

    precheck = LEDGER.precheck
    if precheck is None or getattr(precheck, "prefix", None) is None:
        if rank in victims:
            os.kill(os.getpid(), signal.SIGKILL)
        return
    case_prefix = precheck.prefix
    store = precheck.store
    deadline_s = float(getattr(precheck, "deadline_s", 10.0))
    main_ident = threading.get_ident()

    def restore():
        LEDGER.precheck = precheck

    def is_target(entry) -> bool:
        """The case's next collective (point-to-point ops are not prechecked)."""
        return entry["op"] not in _POINT_TO_POINT and precheck.prefix == case_prefix

    if rank in victims:
        def victim_precheck(entry):
            if not is_target(entry):
                if precheck.prefix != case_prefix:
                    restore()
                return precheck(entry)
            precheck(entry)
            restore()
            peers = [p for p in entry["group"] if p not in victims]
            keys = [f"{case_prefix}fault/inside/{p}" for p in peers]
            threading.Thread(target=_kill_self_when, args=(store, keys, deadline_s), daemon=True,
                             name="fault-kill").start()
            _block_in_gloo_recv(rank)

        LEDGER.precheck = victim_precheck
        return

    def peer_precheck(entry):
        if not is_target(entry):
            if precheck.prefix != case_prefix:
                restore()
            return precheck(entry)
        precheck(entry)
        restore()
        threading.Thread(target=_announce_when_inside, args=(main_ident, store, f"{case_prefix}fault/inside/{rank}",
                                                              deadline_s), daemon=True, name="fault-inside").start()

    LEDGER.precheck = peer_precheck


def _announce_when_inside(main_ident: int, store, key: str, deadline_s: float) -> None:
    import torch.distributed

    torch_dist_dir = os.path.dirname(torch.distributed.__file__) + os.sep
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        frame = sys._current_frames().get(main_ident)
        if frame is not None and frame.f_code.co_filename.startswith(torch_dist_dir):
            store.set(key, "inside")
            return
        time.sleep(0.001)   # a poll interval: the main thread cannot signal us from inside gloo


def _kill_self_when(store, keys: list[str], deadline_s: float) -> None:
    try:
        if keys:
            store.wait(keys, datetime.timedelta(seconds=deadline_s))
    except Exception:
        pass   # a peer never confirmed: die anyway, the report shows where the peer was
    os.kill(os.getpid(), signal.SIGKILL)
