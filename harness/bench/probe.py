"""``python -m harness.bench.probe ARGS``: ``python -m harness ARGS``, plus one timing line.

When the controller's rank group has started (every rank connected and its process group up),
it writes ``BENCH-READY <CLOCK_MONOTONIC seconds>`` to stderr; the time-to-red figure reads it
to split "command start to verdict" into start-up and "ranks ready to verdict". It listens
through the runner's events; nothing else differs from ``python -m harness``.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    from harness.runner.command import main as run_main
    from harness.runner.events import StartupProgress

    class Probe(StartupProgress):
        def ranks_ready(self, pids):
            super().ranks_ready(pids)
            sys.stderr.write(f"BENCH-READY {time.monotonic():.6f}\n")
            sys.stderr.flush()

    if not argv or argv[0] != "run":
        raise SystemExit("usage: python -m harness.bench.probe run ARGS")
    return run_main(argv[1:], events=Probe())


if __name__ == "__main__":
    from harness.errors import exit_from

    exit_from(lambda: main(sys.argv[1:]))
