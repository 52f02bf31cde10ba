"""What a controller can learn about ranks that died or hung: stacks, exit status, ledgers.

Each rank writes three files into its group's run folder: ``stacks-r{rank}.txt`` (faulthandler:
a dump on ``SIGUSR1`` and on a crash), ``ledger-r{rank}.jsonl`` (every collective, flushed
before it is issued) and, for the spawn launcher, ``rank{rank}.log``. :class:`RankFiles` reads
them; :func:`hang_failures` turns a dead or hung rank into the failures a report shows.
"""

from __future__ import annotations

import json
import os
import signal
import time

from harness.collectives.entry import format_entry
from harness.oracles.crossrank import divergence_failure
from harness.oracles.findings import Failure, Oracle

__harness_hidden__ = True

STACK_WAIT_S = 3.0     # how long every live rank together gets to finish its stack dump


class RankFiles:
    """The per-rank files of one group's run folder."""

    def __init__(self, run_dir: str, world: int):
        self.run_dir = run_dir
        self.world = world

    def _path(self, kind: str, rank: int) -> str:
        return os.path.join(self.run_dir, {"stacks": f"stacks-r{rank}.txt", "ledger": f"ledger-r{rank}.jsonl"}[kind])

    # --- stacks --------------------------------------------------------------------------------
    def stack_offsets(self) -> dict[int, int]:
        """Where each rank's stack file ends now: a later dump is read from there."""
        return {r: (os.path.getsize(p) if os.path.exists(p := self._path("stacks", r)) else 0)
                for r in range(self.world)}

    def read_stacks(self, rank: int, offset: int = 0) -> str:
        try:
            with open(self._path("stacks", rank), errors="replace") as fh:
                fh.seek(offset)
                return fh.read()
        except OSError:
            return ""

    def dump_stacks(self, pids: dict[int, int], offsets: dict[int, int], gone, wait_s: float = STACK_WAIT_S):
        """Every rank's Python stacks: SIGUSR1 to every live rank, then read what faulthandler
        wrote (a dead rank's file may hold its crash dump). All ranks are waited for together,
        bounded by ``wait_s``; ``gone(rank)`` says a rank will write no more."""
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        texts: dict[int, str] = {}
        pending = set(range(self.world))
        deadline = time.monotonic() + wait_s
        while pending:
            for r in sorted(pending):
                texts[r] = self.read_stacks(r, offsets.get(r, 0))
                if dump_complete(texts[r]) or gone(r):
                    pending.discard(r)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.05)   # a poll interval: faulthandler writes from a signal handler, no one tells us
        return {r: t.strip() for r, t in texts.items() if t.strip()}

    def crash_line(self, rank: int) -> str:
        """The rank's own last ``Fatal Python error:`` line (SIGSEGV, SIGABRT, ...), or ""."""
        fatal = [line for line in self.read_stacks(rank).splitlines() if line.startswith("Fatal Python error:")]
        return fatal[-1].strip() if fatal else ""

    # --- ledgers -------------------------------------------------------------------------------
    def ledgers(self, case_name: str) -> dict[int, list[dict]]:
        """Each rank's ledger entries of its last run of ``case_name``."""
        ledgers = {}
        for r in range(self.world):
            entries: list[dict] = []
            path = self._path("ledger", r)
            if os.path.exists(path):
                with open(path) as fh:
                    for line in fh:
                        try:
                            obj = json.loads(line)
                        except json.JSONDecodeError:
                            continue
                        if obj.get("begin") == case_name:
                            entries = []
                        elif "seq" in obj:
                            entries.append(obj)
            ledgers[r] = entries
        return ledgers


def dump_complete(text: str) -> bool:
    """A faulthandler dump of all threads is complete once the main thread's outermost frame is in:
    CPython lists the newest thread first and the main thread last."""
    lines = [line for line in text.rstrip().splitlines() if line.strip()]
    return bool(lines) and (lines[-1].endswith(" in <module>") or lines[-1].endswith(" in _run_module_as_main"))


def exit_description(pid: int | None, code: int | None, crash: str) -> str:
    """How a rank ended, as far as the controller knows: its exit status (the spawn launcher's
    own children) or only that its connection closed; plus its own crash line, if it wrote one."""
    crash = f"; {crash}" if crash else ""
    if code is not None and code < 0:
        return f"killed by signal {signal.Signals(-code).name} (pid {pid}){crash}"
    if code is not None:
        return f"exited with code {code} (pid {pid}){crash}"
    return f"its connection closed (pid {pid}){crash}"


def hang_failures(world: int, dead: dict, missing: list, stalled: dict, ledgers: dict, stacks: dict,
                  deadline_s: float, grace_s: float, diagnostics: dict | None = None) -> list:
    """The failures of a case in which ranks died (``dead``: rank -> how) or did not answer
    (``missing``; ``stalled``: rank -> what its watchdog said): one per rank, the first divergent
    collective if the ledgers show one, and every rank's last collective and Python stacks, with
    its ``diagnostics`` (rank -> text: :func:`harness.hangs.report.collect`) when given."""
    failures = [Failure(Oracle.LIVENESS, f"rank {rank} died while running the case: {why}", rank=rank,
                        kind="a rank died while running the case")
                for rank, why in sorted(dead.items())]
    for rank in missing:
        why = stalled.get(rank, f"did not answer within the deadline ({deadline_s:g} s) + {grace_s:g} s")
        failures.append(Failure(Oracle.LIVENESS, f"rank {rank} hung: {why}", rank=rank, kind="a rank hung"))
    divergence = divergence_failure(ledgers)
    if divergence is not None:
        failures.append(divergence)
    in_flight = {r: (ledgers.get(r) or [None])[-1] for r in range(world)}
    stack_text = "\n".join(f"--- rank {r} Python stacks ---\n{stacks.get(r, '(no stack: process gone)')}"
                           + (f"\n--- rank {r} diagnostics ---\n{diagnostics.get(r, '(none)')}" if diagnostics else "")
                           for r in range(world))
    last = "; ".join(f"rank {r}: {format_entry(in_flight[r]) if in_flight[r] else '(none)'}" for r in range(world))
    failures.append(Failure(Oracle.LIVENESS, f"last collective per rank: {last}\n{stack_text}",
                            kind="last collective per rank"))
    return failures
