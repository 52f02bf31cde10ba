"""The bare loop's group: W plain processes on gloo, driven from the benchmark's process.

:class:`BareGroup` starts ``python -m harness.bench.bare_worker`` W times (a FileStore in a
private temp folder for rendezvous), then sends the same command to every rank and collects
one answer per rank. Every wait is bounded; :meth:`BareGroup.stop` ends the ranks with quit,
then terminate, then kill, each bounded.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from harness.errors import SetupError
from harness.runner.cleanup import PREFIX, write_owner

START_TIMEOUT_S = 120.0
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class BareGroup:
    def __init__(self, world_size: int = 2, sut: str = "emulated-patched"):
        self.world = world_size
        self.sut = sut
        self.dir = tempfile.mkdtemp(prefix=f"{PREFIX}bench-bare-")
        write_owner(self.dir)       # swept by the next rank group if this process is killed outright
        self.procs: list[subprocess.Popen] = []
        self.answers: queue.Queue = queue.Queue()
        self.pids: dict[int, int] = {}

    def start(self) -> "BareGroup":
        """Start the ranks and wait for each one's first answer; on any failure or interruption,
        stop what was started (and remove the folder) before the exception goes on."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> "BareGroup":
        for rank in range(self.world):
            env = dict(os.environ, BENCH_RANK=str(rank), BENCH_WORLD=str(self.world), BENCH_SUT=self.sut,
                       BENCH_STORE=os.path.join(self.dir, "store"), PYTHONUNBUFFERED="1")
            log = open(os.path.join(self.dir, f"rank{rank}.log"), "wb")
            proc = subprocess.Popen([sys.executable, "-m", "harness.bench.bare_worker"], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                    cwd=PROJECT_ROOT)
            log.close()
            self.procs.append(proc)
            threading.Thread(target=self._read, args=(rank, proc), daemon=True).start()
        ready = self._gather(START_TIMEOUT_S, "start")
        self.pids = {r: a["pid"] for r, a in ready.items()}
        return self

    def _read(self, rank: int, proc) -> None:
        for line in proc.stdout:
            if line.startswith("BENCH "):
                self.answers.put((rank, json.loads(line[6:])))
        self.answers.put((rank, None))

    def _gather(self, timeout: float, what: str) -> dict[int, dict]:
        got: dict[int, dict] = {}
        deadline = time.monotonic() + timeout
        while len(got) < self.world:
            try:
                rank, answer = self.answers.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                raise SetupError(f"bare loop: no answer to {what} within {timeout:.0f} s{self._log_tail()}") from None
            if answer is None:
                raise SetupError(f"bare loop: rank {rank} exited during {what}{self._log_tail()}")
            got[rank] = answer
        return got

    def _send(self, cmd: dict) -> None:
        text = json.dumps(cmd) + "\n"
        for proc in self.procs:
            proc.stdin.write(text)
            proc.stdin.flush()

    def run(self, cases, *, reset_each_case: bool = False, per_cycle: bool = False, timeout: float = 600.0,
            run_seed: int = 0) -> dict[int, dict]:
        """Every rank runs the cases' model work; per rank: wall_s, per_case_s, cycles, rss_kb, amax_s."""
        self._send({"op": "run", "cases": [c.to_dict() for c in cases], "reset_each_case": reset_each_case,
                    "per_cycle": per_cycle, "run_seed": run_seed})
        return self._gather(timeout, "run")

    def reset(self) -> None:
        """Empty the stack's registries on every rank (a fresh process, as far as the stack can tell)."""
        self._send({"op": "reset"})
        self._gather(60.0, "reset")

    def _log_tail(self) -> str:
        out = []
        for rank in range(self.world):
            try:
                with open(os.path.join(self.dir, f"rank{rank}.log"), errors="replace") as fh:
                    tail = fh.readlines()[-8:]
            except OSError:
                continue
            if tail:
                out.append(f"\n[rank {rank}] " + "".join(tail).rstrip())
        return "".join(out)

    def stop(self) -> None:
        for proc in self.procs:
            try:
                proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                proc.stdin.close()
            except (OSError, ValueError):
                pass
        for action in ("wait", "terminate", "kill"):
            deadline = time.monotonic() + 3.0
            for proc in self.procs:
                if proc.poll() is None and action != "wait":
                    getattr(proc, action)()
            while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
                time.sleep(0.02)
            if all(p.poll() is not None for p in self.procs):
                break
        for proc in self.procs:
            if proc.stdout is not None:
                proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "BareGroup":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
