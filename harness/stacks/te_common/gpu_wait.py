"""Waiting for a rank's GPU with a deadline, and saying what it is stuck on when it runs out.

TE's work is asynchronous: a collective that waits for a peer (NCCL) or a Userbuffers chunk
that never comes blocks the GPU, and the CPU only notices at its next synchronisation (a copy
to the host, ``torch.cuda.synchronize``), where it would block for good. So the TE stack ends
every call that issues GPU work (build, step, optimizer step, destroy) with
:func:`wait_for_gpu`: an event recorded on the current stream, which every stream TE used has
joined by then, polled until it completes or the deadline passes. Polling is the mechanism
here (CUDA has no wait with a timeout), not synchronisation by sleeping: the sleeps only bound
how often the event is asked, growing from 10 us to 2 ms.

When the deadline passes, :class:`GpuStalled` (a :class:`~harness.errors.DeadlineExceeded`,
so the case fails with ``liveness``) says which Userbuffers exchange is in progress and which
chunk of which rank it waits for (:mod:`.ub_progress`), and the rank's last collectives from
PyTorch's flight recorder (:mod:`harness.hangs.flight_recorder`) with their state (which one
the GPU still waits on). The recorder is read without the collectives' Python frames: torch
symbolizes them on first use in seconds, and the rank must answer before its watchdog reports
it stalled (2 s after the deadline); the ledger comparison after the case names every
collective's call site. The GPU stays blocked; the stack's ``reset()`` then refuses to release
the communicators under a running kernel, and the runner starts new processes.
"""

from __future__ import annotations

import time

import torch

from harness.hangs import flight_recorder
from harness.errors import DeadlineExceeded

FIRST_PAUSE_S = 1e-5
LAST_PAUSE_S = 2e-3


class GpuStalled(DeadlineExceeded):
    """This rank's GPU did not finish its work before the deadline; ``detail`` says on what."""

    def __init__(self, what: str, seconds: float, detail: str = ""):
        super().__init__(what, seconds)
        self.detail = detail
        if detail:
            self.args = (f"{self.args[0]}\n{detail}",)

    def __reduce__(self):
        return (GpuStalled, (self.what, self.seconds, self.detail))


def idle_within(event, deadline_s: float) -> bool:
    """Poll ``event`` until it completes (True) or ``deadline_s`` passes (False)."""
    end = time.monotonic() + deadline_s
    pause = FIRST_PAUSE_S
    while not event.query():
        now = time.monotonic()
        if now >= end:
            return False
        time.sleep(min(pause, end - now))
        pause = min(pause * 2, LAST_PAUSE_S)
    return True


def stall_detail(pending: list[str], flight: str) -> str:
    """The text of a :class:`GpuStalled`: pending exchanges first, then the flight recorder."""
    lines = []
    if pending:
        lines.append("Userbuffers exchanges not finished on this rank:")
        lines += ["  " + line for line in pending]
    else:
        lines.append("no Userbuffers exchange pending on this rank: the GPU waits on other work "
                     "(a collective: see below)")
    lines.append(flight)
    return "\n".join(lines)


def wait_for_gpu(device: torch.device, deadline_s: float, what: str, pending=lambda: []) -> None:
    """Return once every stream joined to the current one is idle; else raise :class:`GpuStalled`.

    ``pending()`` lists the unfinished exchanges (:meth:`UbProgress.pending`).
    """
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    if idle_within(event, deadline_s):
        return
    try:
        flight = flight_recorder.format_dump(flight_recorder.dump(frames=False), last=6)
    except Exception as exc:
        flight = f"flight recorder: could not dump: {type(exc).__name__}: {exc}"
    raise GpuStalled(f"{what}: the GPU work", deadline_s, stall_detail(pending(), flight))
