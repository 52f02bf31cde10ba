"""What a run tells its caller while it goes: rank start-up, groups ready, each case's outcome.

The runner calls these hooks; front ends and measurements override the ones they need. The
terminal front end shows start-up progress; the benchmark takes its timings here (instead of
patching the runner). Hooks run on the runner's main thread and must return quickly.
"""

from __future__ import annotations

import sys
import time

__harness_hidden__ = True


class RunEvents:
    """No-op hooks; subclass and override."""

    def ranks_starting(self, world: int, connected: int, ready: int, elapsed_s: float) -> None:
        """Called about twice a second while a group starts."""

    def ranks_ready(self, pids: dict[int, int]) -> None:
        """Every rank of a new group is connected and its process group is up."""

    def case_ran(self, index: int, case, outcome) -> None:
        """The shared run of case ``index`` ended with ``outcome`` (a GroupOutcome, every rank's
        RankResult), before the isolated re-run and the verdict."""


class StartupProgress(RunEvents):
    """Shows rank start-up on stdout, beside the cases' lines, when it takes longer than
    ``after_s``, updated every ``every_s`` (stderr is kept for the one line of an error)."""

    def __init__(self, stream=None, after_s: float = 3.0, every_s: float = 2.0):
        self.stream = stream or sys.stdout
        self.after_s, self.every_s = after_s, every_s
        self._shown_at: float | None = None
        self._started = False

    def ranks_starting(self, world, connected, ready, elapsed_s):
        if elapsed_s < self.after_s:
            return
        now = time.monotonic()
        if self._shown_at is not None and now - self._shown_at < self.every_s:
            return
        self._shown_at = now
        self._started = True
        print(f"starting {world} ranks: {connected} connected, {ready} ready ({elapsed_s:.0f} s)",
              file=self.stream, flush=True)

    def ranks_ready(self, pids):
        if self._started:
            print(f"all {len(pids)} ranks ready", file=self.stream, flush=True)
        self._shown_at, self._started = None, False
