"""A persistent rank group as the controller sees it: processes, connections, one case at a time.

A :class:`RankGroup` is W worker processes (:mod:`harness.runner.rank.worker`) started by a
launcher (spawn, torchrun, mpirun), each connected back over a Unix socket in a private temp
folder, with a TCP store on a port the OS chooses (so rendezvous never collides between
concurrent runs or ``pytest -n`` workers). The run's settings are written once into that folder
before the ranks start. Reader threads only put messages on a queue; the main thread reads with
a timeout and hands each message to the handler its kind maps to.

Every case's results come to the controller out of band, never through a collective that may
be the broken thing. A rank that dies or stops answering turns the case into a report with every
rank's Python stack and ledger (:mod:`harness.runner.diagnostics`); what to do with the group
afterwards is the backend's policy (:mod:`harness.runner.controlled`).
"""

from __future__ import annotations

import os
import queue
import secrets
import shutil
import tempfile
import threading
import time
from multiprocessing.connection import Listener

from harness.errors import HarnessError, SetupError
from harness.oracles.findings import Failure, Oracle
from harness.phases import mark
from harness.runner import messages as msg
from harness.runner.address import controller_address, for_environment
from harness.runner.cleanup import PREFIX, kill_processes_with_env, sweep_abandoned, unlink_shm_prefix, write_owner
from harness.runner.diagnostics import RankFiles, exit_description, hang_failures
from harness.runner.judge import GroupOutcome
from harness.runner.launchers import get_launcher
from harness.runner.rank.result import RankResult

__harness_hidden__ = True

STARTUP_TIMEOUT_S = 90.0
GRACE_S = 5.0          # how long the other ranks get once one rank has answered or stalled
WAIT_S = 0.25          # the main thread's queue read: how often it looks at the clock


class GroupBroken(HarnessError):
    pass


class RankGroup:
    def __init__(self, cfg, events=None, generation: int = 0):
        self.cfg = cfg
        self.world = cfg.world_size
        self.events = events
        self.generation = generation
        self.run_dir = tempfile.mkdtemp(prefix=f"{PREFIX}run-")
        self.shm_prefix = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}-"
        write_owner(self.run_dir, self.shm_prefix)     # so a group after a SIGKILLed controller can sweep it
        self.files = RankFiles(self.run_dir, self.world)
        self.queue: queue.Queue = queue.Queue()
        self.conns: dict[int, object] = {}
        self.pids: dict[int, int] = {}
        self.hosts: dict[int, str] = {}
        self.procs = None
        self.store = None
        self._listener = None
        self._stopped = False
        self.unresponsive: set[int] = set()   # ranks that neither answered nor died: asking them to stop is moot
        self.stragglers: list[int] = []     # pids still alive after the launcher stopped, killed by marker

    # --- start ---------------------------------------------------------------------------------
    def start(self) -> "RankGroup":
        """Start the ranks and wait until every one is ready; on any failure or interruption
        (SIGINT, SIGTERM) stop whatever was started before the exception goes on."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> "RankGroup":
        import datetime

        import torch.distributed as dist

        launcher = get_launcher(self.cfg.launcher.value)
        launcher.check()
        sweep_abandoned()      # what a controller killed outright (SIGKILL, the OOM killer) left behind
        authkey = secrets.token_bytes(16)
        address = controller_address(self.run_dir)
        self._listener = Listener(address=address, family="AF_UNIX", authkey=authkey)
        # The group's store: hosted here, on a port the OS chooses, so concurrent runs never collide.
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=60))
        # The ranks reach this controller over a Unix socket and 127.0.0.1: one host, one build of
        # torch, so the controller's reference is the ranks' to the bit.
        self.cfg.rank_settings(reference_by_judge=True).write(self.run_dir)
        env = dict(os.environ)
        env.update({
            "HARNESS_WORKER": "1", "HARNESS_LAUNCHER": self.cfg.launcher.value,
            "HARNESS_CONTROLLER": for_environment(address), "HARNESS_AUTHKEY": authkey.hex(),
            "HARNESS_CONTROLLER_PID": str(os.getpid()),
            "HARNESS_RUN_DIR": self.run_dir, "HARNESS_SHM_PREFIX": self.shm_prefix,
            "PYTHONUNBUFFERED": "1", "HARNESS_STORE_PORT": str(self.store.port),
        })
        from harness.hangs import flight_recorder

        env.update(flight_recorder.environment(env=env))   # read by a hang report (harness/hangs/report.py)
        self.procs = launcher.start(self.world, env, self.run_dir)
        threading.Thread(target=self._accept_loop, daemon=True, name="harness-accept").start()
        ready: set[int] = set()

        def hello(rank, m):
            if m.world_size != self.world:
                raise SetupError(f"rank {m.rank} reports world size {m.world_size}, expected {self.world}")
            self.pids[m.rank], self.hosts[m.rank] = m.pid, m.host

        def eof(rank, _):
            raise SetupError(f"rank {rank} exited during start-up:\n{self._log_tail()}")

        def bad(rank, body):
            raise SetupError(f"rank {rank} sent an unreadable message during start-up: {body[1]}")

        handlers = {msg.Hello: hello, msg.Ready: lambda rank, m: ready.add(m.rank), "eof": eof, "bad": bad}
        started = time.monotonic()
        while len(ready) < self.world:
            event = self._next(WAIT_S)
            elapsed = time.monotonic() - started
            if self.events is not None:
                self.events.ranks_starting(self.world, len(self.pids), len(ready), elapsed)
            if event is None:
                if not self.procs.alive():
                    raise SetupError(f"the {self.cfg.launcher} rank group exited during start-up:\n{self._log_tail()}")
                if elapsed > STARTUP_TIMEOUT_S:
                    raise SetupError(f"the {self.cfg.launcher} rank group did not start within "
                                     f"{STARTUP_TIMEOUT_S:.0f} s:\n{self._log_tail()}")
                continue
            _dispatch(handlers, event)
        if self.events is not None:
            mark("controller: every rank ready")
            self.events.ranks_ready(dict(self.pids))
        return self

    def _accept_loop(self) -> None:
        while len(self.conns) < self.world:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError):
                return
            try:
                first = msg.decode(conn.recv_bytes())
            except (EOFError, OSError, HarnessError):
                continue
            rank = first.rank
            self.conns[rank] = conn
            self.queue.put((rank, first))
            threading.Thread(target=self._read_loop, args=(rank, conn), daemon=True,
                             name=f"harness-read-r{rank}").start()

    def _read_loop(self, rank: int, conn) -> None:
        while True:
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                self.queue.put((rank, "eof"))
                return
            try:
                self.queue.put((rank, msg.decode(data)))
            except HarnessError as exc:
                self.queue.put((rank, ("bad", str(exc))))

    def _next(self, timeout: float):
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    # --- running -------------------------------------------------------------------------------
    def _send_all(self, m) -> None:
        data = msg.encode(m)        # the same bytes for every rank: encode once
        for rank in range(self.world):
            try:
                self.conns[rank].send_bytes(data)
            except (OSError, KeyError) as exc:
                raise GroupBroken(f"cannot reach rank {rank}: {exc}") from None

    def run_case(self, index: int, case, meanwhile=None) -> GroupOutcome:
        """``meanwhile``: called once the case is on its way to every rank, before the wait for
        their results (the judge's reference simulation, on a core the ranks leave idle)."""
        return self._collect(msg.RunCase(index, case.to_dict()), case.name, isolated=False, meanwhile=meanwhile)

    def run_isolated(self, index: int, case) -> GroupOutcome:
        return self._collect(msg.RunIsolated(index, case.to_dict()), case.name, isolated=True)

    def _collect(self, m, case_name: str, isolated: bool, meanwhile=None) -> GroupOutcome:
        offsets = self.files.stack_offsets()
        try:
            self._send_all(m)
        except GroupBroken as exc:
            return GroupOutcome({}, [Failure(Oracle.LIVENESS, str(exc), kind="the group broke")], broken=True)
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:      # the results must still be gathered; the judge redoes it and reports
                pass
        wait = _Answers(self, m.index, isolated)
        wait.gather()
        missing = [r for r in range(self.world) if r not in wait.results and r not in wait.dead]
        self.unresponsive.update(missing)
        if not wait.dead and not missing:
            return GroupOutcome(wait.results, [])
        # Something died or hung: stacks and diagnostics from every live rank, the ledgers, then the report.
        from harness.hangs import report as hang_report

        request = hang_report.request(self.run_dir)      # the ranks answer while their stacks are dumped
        stacks = self.files.dump_stacks(self.pids, offsets, gone=self._pid_gone)
        diagnostics = hang_report.collect(self.run_dir, request, dict(self.pids),
                                          self.procs.log_paths if self.procs else ())
        failures = hang_failures(self.world, wait.dead, missing, wait.stalled, self.files.ledgers(case_name),
                                 stacks, self.cfg.deadline_s, GRACE_S, diagnostics)
        return GroupOutcome(wait.results, failures, broken=True,
                            artifacts={"stacks": stacks, "diagnostics": diagnostics})

    def recycle(self, new_group: bool = True) -> bool:
        """Soft recycle: empty registries and (unless ``new_group`` is False) a fresh process group,
        in the same processes. ``new_group=False`` when the precheck stopped every mismatched
        collective before it reached gloo, so the process group itself is sound.

        Returns False when some rank does not confirm within the deadline (then stop and respawn).
        """
        self.generation += 1
        try:
            self._send_all(msg.Recycle(self.generation, new_group))
        except GroupBroken:
            return False
        ready = set()
        deadline = time.monotonic() + self.cfg.deadline_s + GRACE_S
        while len(ready) < self.world and time.monotonic() < deadline:
            event = self._next(WAIT_S)
            if event is None:
                continue
            rank, body = event
            if body == "eof":
                return False
            if isinstance(body, msg.Ready):
                ready.add(rank)
        return len(ready) == self.world

    # --- what the controller can tell about a rank ---------------------------------------------
    def exit_description(self, rank: int) -> str:
        code = None
        if self.cfg.launcher.value == "spawn" and self.procs is not None:
            # Our own child: its exit status is known once it is reaped (a moment after the EOF).
            proc = self.procs.procs[rank]
            deadline = time.monotonic() + 2
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            code = proc.poll()
        # A crash (SIGSEGV, SIGABRT, ...) is named by the rank's own faulthandler dump, written
        # before the process died; with torchrun or mpirun that is all the controller can know.
        return exit_description(self.pids.get(rank), code, self.files.crash_line(rank))

    def _pid_gone(self, rank: int) -> bool:
        pid = self.pids.get(rank)
        if pid is None:
            return True
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True

    def _log_tail(self, lines: int = 15) -> str:
        out = []
        for path in (self.procs.log_paths if self.procs else []):
            try:
                with open(path, errors="replace") as fh:
                    out.append(f"[{os.path.basename(path)}] " + "".join(fh.readlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(out)

    # --- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """Shut the ranks down (asked, then terminate, then kill, each bounded) and remove what the
        group left: its shared-memory segments and run folder. Safe to call again after a call
        that was interrupted half way: every step is idempotent, and only a completed stop counts."""
        if self._stopped:
            return
        # Asked first, so a healthy rank leaves by its own shutdown path; a rank that hung will not
        # read the request, so a group with one goes straight to the signals (3 s less per hang).
        polite = not self.unresponsive
        for conn in self.conns.values():
            try:
                conn.send_bytes(msg.encode(msg.Shutdown()))
            except OSError:
                pass
        if self.procs is not None:
            if polite:
                deadline = time.monotonic() + 3
                while self.procs.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
            self.procs.stop()
        for conn in self.conns.values():
            try:
                conn.close()
            except OSError:
                pass
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        # Whatever the launcher did not stop (a torchrun rank in its own session, a zygote): by
        # the group's own environment marker, so nothing of another group is touched.
        self.stragglers = kill_processes_with_env("HARNESS_RUN_DIR", self.run_dir)
        unlink_shm_prefix(self.shm_prefix)
        self.store = None
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self._stopped = True


class _Answers:
    """Waiting for every rank's answer to one case: results, deaths and stall reports."""

    def __init__(self, group: RankGroup, index: int, isolated: bool):
        self.group, self.index, self.isolated = group, index, isolated
        self.results: dict[int, RankResult] = {}
        self.dead: dict[int, str] = {}
        self.stalled: dict[int, str] = {}
        self.first_answer_at: float | None = None
        self.done = False
        self.handlers = {msg.CaseDone: self.case_done, msg.Stalled: self.stall, "eof": self.eof, "bad": self.bad,
                         msg.Ready: _ignore, msg.Hello: _ignore}

    def gather(self) -> None:
        world, deadline_s = self.group.world, self.group.cfg.deadline_s
        hard_deadline = time.monotonic() + max(120.0, deadline_s * 20)
        while not self.done and len(self.results) + len(self.dead) < world:
            now = time.monotonic()
            if self.first_answer_at is not None and now > self.first_answer_at + deadline_s + GRACE_S:
                return
            if now > hard_deadline:
                return
            event = self.group._next(WAIT_S)
            if event is not None:
                _dispatch(self.handlers, event)

    def _answered(self) -> None:
        self.first_answer_at = self.first_answer_at or time.monotonic()

    def case_done(self, rank: int, m) -> None:
        if m.index == self.index and m.isolated == self.isolated:
            self.results[rank] = RankResult.from_dict(m.result)
            self._answered()

    def stall(self, rank: int, m) -> None:
        if self.isolated or m.index not in (self.index, -1):
            return     # a late report of an earlier case
        self.stalled[rank] = (f"made no progress for {m.seconds:.1f} s"
                              + (f" inside {m.in_flight['op']} #{m.in_flight['seq']}" if m.in_flight else ""))
        self._answered()
        # A stalled rank has been without progress for longer than any collective's deadline:
        # it will not answer. Once every rank still out is stalled, stop waiting.
        out = [r for r in range(self.group.world) if r not in self.results and r not in self.dead]
        self.done = all(r in self.stalled for r in out)

    def eof(self, rank: int, _) -> None:
        if rank not in self.results:
            self.dead[rank] = self.group.exit_description(rank)
        self._answered()

    def bad(self, rank: int, body) -> None:
        self.dead[rank] = f"sent an unreadable message: {body[1]}"


def _ignore(rank, m) -> None:
    pass


def _dispatch(handlers: dict, event) -> None:
    """Hand ``(rank, body)`` to the handler of its kind: a message class, ``"eof"`` or ``"bad"``."""
    rank, body = event
    key = body if body == "eof" else (body[0] if isinstance(body, tuple) else type(body))
    handler = handlers.get(key)
    if handler is None:
        raise msg.ProtocolError(f"rank {rank} sent a {getattr(key, '__name__', key)} message the controller "
                                f"does not expect now")
    handler(rank, body)
