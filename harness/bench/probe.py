"""``python -m harness.bench.probe ARGS``: ``python -m harness ARGS``, plus one timing line.

When the controller's rank group has started (every rank connected and its process group up),
it writes ``BENCH-READY <CLOCK_MONOTONIC seconds>`` to stderr; the time-to-red figure reads it
to split "command start to verdict" into start-up and "ranks ready to verdict". Nothing else
differs from ``python -m harness``.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    from harness.runner import controller

    original = controller.RankGroup.start

    def start(self):
        group = original(self)
        sys.stderr.write(f"BENCH-READY {time.monotonic():.6f}\n")
        sys.stderr.flush()
        return group

    controller.RankGroup.start = start
    from harness.cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
