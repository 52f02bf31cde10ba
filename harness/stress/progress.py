"""The progress line on stderr: elapsed/budget, cases, failures, reuse events, cases/s.

On a terminal the line is redrawn in place (at most 5 times a second) and notes are printed
above it; elsewhere (CI logs) a full line is printed every ``log_every_s`` seconds and notes as
they come.
"""

from __future__ import annotations

import sys
import time


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class Progress:
    def __init__(self, budget_s: float, stream=None, log_every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.budget_s = budget_s
        self.log_every_s = log_every_s
        self.t0 = time.monotonic()
        self._last_draw = 0.0
        self._width = 0
        self.phase = "starting"

    def line(self, totals) -> str:
        elapsed = time.monotonic() - self.t0
        frac = min(1.0, elapsed / self.budget_s) if self.budget_s > 0 else 1.0
        bar = "#" * int(frac * 20) + "." * (20 - int(frac * 20))
        rate = totals.cases / elapsed if elapsed > 0 else 0.0
        return (f"stress [{bar}] {_clock(elapsed)}/{_clock(self.budget_s)}  cases {totals.cases}  "
                f"failures {totals.failing_cases} ({totals.failures} distinct)  reuse {totals.reuse_events}  "
                f"{rate:.2f} cases/s  {self.phase}")

    def update(self, totals, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if force or now - self._last_draw >= 0.2:
                text = self.line(totals)
                self.stream.write("\r" + text + " " * max(0, self._width - len(text)))
                self.stream.flush()
                self._width = len(text)
                self._last_draw = now
        elif force or now - self._last_draw >= self.log_every_s:
            self.stream.write(self.line(totals) + "\n")
            self.stream.flush()
            self._last_draw = now

    def note(self, text: str) -> None:
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
            self._last_draw = 0.0
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self, totals) -> None:
        self.update(totals, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
