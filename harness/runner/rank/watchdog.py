"""A rank's watchdog thread: a case that makes no progress for too long is reported, once.

Progress is a step starting or a collective entering or returning (the ledger calls
:meth:`Watchdog.progress`). When a case has made none for the deadline plus two seconds, the
watchdog calls ``on_stall(idle_s, case)``: a controlled rank tells its controller, an SPMD rank
dumps its own stacks into the store for rank 0 to report. With ``controller_pid`` set the
watchdog also ends the rank when that process is gone, so no rank outlives its controller.
``on_round()``, when given, runs at the end of every round (a controlled rank answers the
controller's request for its diagnostics there: :mod:`harness.hangs.report`).
"""

from __future__ import annotations

import os
import threading
import time

from harness.idreuse.morgue import run_quietly

__harness_hidden__ = True

ORPHAN_EXIT_CODE = 70     # the controller is gone (a rank's exit status then)
STALL_MARGIN_S = 2.0      # beyond the deadline: the collective's own timeout fires first if it can


def die_with_parent(parent_pid: int) -> None:
    """Linux: this process gets SIGKILL when its parent dies (the controller of a spawned group,
    or the launcher's agent, torchrun's or hydra's proxy, of an SPMD rank), so that no rank
    outlives what started it, even after a ``kill -9`` of the launch.

    A parent that died before this call (a controller killed while a hundred ranks were still
    starting) would never deliver the signal: then this process is already an orphan, and goes.
    """
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() != parent_pid:
        os._exit(ORPHAN_EXIT_CODE)


class Watchdog(threading.Thread):
    def __init__(self, deadline_s: float, on_stall, controller_pid: int | None = None, on_round=None):
        super().__init__(daemon=True, name="harness-watchdog")
        self.deadline_s = deadline_s
        self.on_stall = on_stall
        self.controller_pid = controller_pid
        self.on_round = on_round
        self.case = None            # what is being watched (a case index or key); None: idle
        self.last_progress = time.monotonic()

    def watch(self, case) -> None:
        """A case begins: watch it (one report per case)."""
        self.progress()
        self.case = case

    def idle(self) -> None:
        self.case = None

    def progress(self) -> None:
        self.last_progress = time.monotonic()

    def run(self) -> None:
        run_quietly(self._round)

    def _round(self) -> None:
        if self.controller_pid is not None:
            try:
                os.kill(self.controller_pid, 0)
            except ProcessLookupError:
                os._exit(ORPHAN_EXIT_CODE)    # the controller died: never outlive it
        case = self.case
        if case is not None:
            idle = time.monotonic() - self.last_progress
            if idle > self.deadline_s + STALL_MARGIN_S:
                self.case = None
                self.on_stall(idle, case)
        if self.on_round is not None:
            self.on_round()
