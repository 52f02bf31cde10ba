"""The controller: persistent rank groups, one case at a time, with recycling on failure.

A :class:`RankGroup` is W worker processes started by a launcher (spawn, torchrun, mpirun),
each connected back over a Unix socket in a private temp folder (so rendezvous never collides
between concurrent runs or ``pytest -n`` workers). Reader threads only put messages on a queue;
the main thread reads with a timeout and decides.

Every case's verdict is agreed out of band: each rank sends its own result to the controller,
never through a collective that may be the broken thing. A case that crashes a rank or hangs
gets every rank's Python stack (SIGUSR1 -> faulthandler), the ledgers are compared to find the
first divergent collective, and the group is torn down (terminate, then kill, each bounded)
and replaced by a fresh one for the next case.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import secrets
import shutil
import signal
import tempfile
import threading
import time
from multiprocessing.connection import Listener

from harness.errors import HarnessError, SetupError
from harness.oracles.crossrank import first_divergence, ledger_truncated, scale_disagreement
from harness.oracles.findings import Failure
from harness.oracles.isolation import compare_runs
from harness.report.model import CaseReport, RunReport, group_digest, skipped, verdict
from harness.runner import messages as msg
from harness.runner.case_exec import RankResult
from harness.runner.config import RunConfig
from harness.runner.launchers import get_launcher
from harness.stacks import load_stack
from harness.stacks.capabilities import declined_by

STARTUP_TIMEOUT_S = 90.0
GRACE_S = 5.0          # how long the other ranks get once one rank has answered or stalled
SHM_PREFIX = "fp8h-"


class GroupBroken(HarnessError):
    pass


@dataclasses.dataclass
class CaseOutcome:
    results: dict            # rank -> RankResult
    failures: list           # group-level failures (liveness, crashes)
    broken: bool             # the group must be recycled
    artifacts: dict = dataclasses.field(default_factory=dict)


class RankGroup:
    def __init__(self, cfg: RunConfig, generation: int = 0):
        self.cfg = cfg
        self.world = cfg.world_size
        self.generation = generation
        self.run_dir = tempfile.mkdtemp(prefix=f"{SHM_PREFIX}run-")
        self.shm_prefix = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(3)}-"
        self.events: queue.Queue = queue.Queue()
        self.conns: dict[int, object] = {}
        self.pids: dict[int, int] = {}
        self.procs = None
        self._listener = None
        self._stopped = False
        self.stragglers: list[int] = []     # pids still alive after the launcher stopped, killed by marker

    # --- start ------------------------------------------------------------------------------
    def start(self) -> "RankGroup":
        """Start the ranks and wait until every one is ready; on any failure or interruption
        (SIGINT, SIGTERM) stop whatever was started before the exception goes on."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> "RankGroup":
        launcher = get_launcher(self.cfg.launcher)
        launcher.check()
        authkey = secrets.token_bytes(16)
        address = os.path.join(self.run_dir, "ctl.sock")
        self._listener = Listener(address=address, family="AF_UNIX", authkey=authkey)
        import datetime

        import torch.distributed as dist

        # The group's store: hosted here, on a port the OS chooses, so concurrent runs never collide.
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=60))
        env = dict(os.environ)
        env.update({
            "HARNESS_WORKER": "1", "HARNESS_LAUNCHER": self.cfg.launcher, "HARNESS_CONTROLLER": address,
            "HARNESS_AUTHKEY": authkey.hex(), "HARNESS_CONTROLLER_PID": str(os.getpid()),
            "HARNESS_RUN_DIR": self.run_dir, "HARNESS_SUT": self.cfg.sut,
            "HARNESS_DEADLINE": str(self.cfg.options.deadline_s), "HARNESS_SHM_PREFIX": self.shm_prefix,
            "PYTHONUNBUFFERED": "1", "HARNESS_STORE_PORT": str(self.store.port),
        })
        if self.cfg.sut_options.get("inject"):
            env["HARNESS_INJECT"] = self.cfg.sut_options["inject"]
        self.procs = launcher.start(self.world, env, self.run_dir)
        threading.Thread(target=self._accept_loop, daemon=True, name="harness-accept").start()
        hello, ready = set(), set()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while len(ready) < self.world:
            try:
                kind, rank, m = self.events.get(timeout=0.5)
            except queue.Empty:
                if not self.procs.alive():
                    self.stop()
                    raise SetupError(f"the {self.cfg.launcher} rank group exited during start-up:\n{self._log_tail()}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise SetupError(f"the {self.cfg.launcher} rank group did not start within {STARTUP_TIMEOUT_S:.0f} s:"
                                     f"\n{self._log_tail()}")
                continue
            if kind == "msg" and isinstance(m, msg.Hello):
                if m.world_size != self.world:
                    self.stop()
                    raise SetupError(f"rank {m.rank} reports world size {m.world_size}, expected {self.world}")
                self.pids[m.rank] = m.pid
                hello.add(m.rank)
            elif kind == "msg" and isinstance(m, msg.Ready):
                ready.add(m.rank)
            elif kind == "eof":
                self.stop()
                raise SetupError(f"rank {rank} exited during start-up:\n{self._log_tail()}")
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
            self.events.put(("msg", rank, first))
            threading.Thread(target=self._read_loop, args=(rank, conn), daemon=True,
                             name=f"harness-read-r{rank}").start()

    def _read_loop(self, rank: int, conn) -> None:
        while True:
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                self.events.put(("eof", rank, None))
                return
            try:
                self.events.put(("msg", rank, msg.decode(data)))
            except HarnessError as exc:
                self.events.put(("bad", rank, str(exc)))

    # --- running ----------------------------------------------------------------------------
    def _send_all(self, m) -> None:
        data = msg.encode(m)        # the same bytes for every rank: encode once
        for rank in range(self.world):
            try:
                self.conns[rank].send_bytes(data)
            except (OSError, KeyError) as exc:
                raise GroupBroken(f"cannot reach rank {rank}: {exc}") from None

    def run_case(self, index: int, case, options) -> CaseOutcome:
        return self._collect(index, msg.RunCase(index, case.to_dict(), options.to_dict()), case.name, isolated=False)

    def run_isolated(self, index: int, case, options) -> CaseOutcome:
        return self._collect(index, msg.RunIsolated(index, case.to_dict(), options.to_dict()), case.name,
                             isolated=True)

    def _collect(self, index: int, m, case_name: str, isolated: bool) -> CaseOutcome:
        deadline_s = self.cfg.options.deadline_s
        stack_offsets = self._stack_offsets()
        try:
            self._send_all(m)
        except GroupBroken as exc:
            return CaseOutcome({}, [Failure("liveness", str(exc))], True)
        results: dict[int, RankResult] = {}
        dead: dict[int, str] = {}
        stalled: dict[int, str] = {}
        first_answer_at = None
        hard_deadline = time.monotonic() + max(120.0, deadline_s * 20)
        while len(results) + len(dead) < self.world:
            now = time.monotonic()
            if first_answer_at is not None and now > first_answer_at + deadline_s + GRACE_S:
                break
            if now > hard_deadline:
                break
            try:
                kind, rank, body = self.events.get(timeout=0.25)
            except queue.Empty:
                continue
            if kind == "eof":
                if rank not in results:
                    dead[rank] = self._exit_description(rank)
                first_answer_at = first_answer_at or time.monotonic()
            elif kind == "bad":
                dead[rank] = f"sent an unreadable message: {body}"
            elif isinstance(body, msg.CaseDone) and body.index == index and body.isolated == isolated:
                results[rank] = RankResult.from_dict(body.result)
                first_answer_at = first_answer_at or time.monotonic()
            elif isinstance(body, msg.Stalled) and body.index in (index, -1) and not isolated:
                stalled[rank] = (f"made no progress for {body.seconds:.1f} s"
                                 + (f" inside {body.in_flight['op']} #{body.in_flight['seq']}" if body.in_flight else ""))
                first_answer_at = first_answer_at or time.monotonic()
                # A stalled rank has been without progress for longer than any collective's
                # deadline: it will not answer. Once every rank still out is stalled, stop waiting.
                if all(r in stalled for r in range(self.world) if r not in results and r not in dead):
                    break
        missing = [r for r in range(self.world) if r not in results and r not in dead]
        failures: list[Failure] = []
        if not dead and not missing:
            return CaseOutcome(results, failures, False)
        # Something died or hung: stacks from every live rank, the ledgers, then recycle.
        stacks = self._dump_stacks(stack_offsets)
        ledgers = self._read_ledgers(case_name)
        divergence = first_divergence(ledgers)
        for rank, why in sorted(dead.items()):
            failures.append(Failure("liveness", f"rank {rank} died while running the case: {why}", rank=rank))
        for rank in missing:
            why = stalled.get(rank, f"did not answer within the deadline ({deadline_s:g} s) + {GRACE_S:g} s")
            failures.append(Failure("liveness", f"rank {rank} hung: {why}", rank=rank))
        if divergence:
            # A ledger that merely stops early belongs to the rank that died or hung.
            failures.append(Failure("liveness" if ledger_truncated(ledgers) else "cross-rank", divergence))
        in_flight = {r: (ledgers.get(r) or [None])[-1] for r in range(self.world)}
        stack_text = "\n".join(f"--- rank {r} Python stacks ---\n{stacks.get(r, '(no stack: process gone)')}"
                               for r in range(self.world))
        failures.append(Failure("liveness", "last collective per rank: " + "; ".join(
            f"rank {r}: {_fmt(in_flight[r])}" for r in range(self.world)) + "\n" + stack_text))
        return CaseOutcome(results, failures, True, {"stacks": stacks})

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
        deadline = time.monotonic() + self.cfg.options.deadline_s + GRACE_S
        while len(ready) < self.world and time.monotonic() < deadline:
            try:
                kind, rank, body = self.events.get(timeout=0.25)
            except queue.Empty:
                continue
            if kind == "eof":
                return False
            if isinstance(body, msg.Ready):
                ready.add(rank)
        return len(ready) == self.world

    # --- diagnostics ------------------------------------------------------------------------
    def _exit_description(self, rank: int) -> str:
        pid = self.pids.get(rank)
        # A crash (SIGSEGV, SIGABRT, ...) is named by the rank's own faulthandler dump, written
        # before the process died; with torchrun or mpirun that is all the controller can know.
        crash = self._crash_line(rank)
        crash = f"; {crash}" if crash else ""
        if self.cfg.launcher == "spawn" and self.procs is not None:
            deadline = time.monotonic() + 2
            proc = self.procs.procs[rank]
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            code = proc.poll()
            if code is not None and code < 0:
                return f"killed by signal {signal.Signals(-code).name} (pid {pid}){crash}"
            if code is not None:
                return f"exited with code {code} (pid {pid}){crash}"
        return f"its connection closed (pid {pid}){crash}"

    def _crash_line(self, rank: int) -> str:
        fatal = [line for line in self._read_stack_file(rank, 0).splitlines() if line.startswith("Fatal Python error:")]
        return fatal[-1].strip() if fatal else ""

    def _stack_offsets(self) -> dict[int, int]:
        out = {}
        for r in range(self.world):
            path = os.path.join(self.run_dir, f"stacks-r{r}.txt")
            out[r] = os.path.getsize(path) if os.path.exists(path) else 0
        return out

    def _dump_stacks(self, offsets: dict[int, int], wait_s: float = 3.0) -> dict[int, str]:
        """Every rank's Python stacks: SIGUSR1 to every live rank, then read what faulthandler wrote
        (a dead rank's file may hold its crash dump). All ranks are waited for together, bounded."""
        for rank, pid in self.pids.items():
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        texts: dict[int, str] = {}
        pending = set(range(self.world))
        deadline = time.monotonic() + wait_s
        while pending:
            for r in sorted(pending):
                text = self._read_stack_file(r, offsets.get(r, 0))
                texts[r] = text
                # Complete (see _dump_complete), or final: a dead rank writes no more.
                if _dump_complete(text) or self._pid_gone(r):
                    pending.discard(r)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.05)   # a poll interval: faulthandler writes from a signal handler, no one tells us
        return {r: t.strip() for r, t in texts.items() if t.strip()}

    def _read_stack_file(self, rank: int, offset: int) -> str:
        path = os.path.join(self.run_dir, f"stacks-r{rank}.txt")
        try:
            with open(path, errors="replace") as fh:
                fh.seek(offset)
                return fh.read()
        except OSError:
            return ""

    def _pid_gone(self, rank: int) -> bool:
        pid = self.pids.get(rank)
        if pid is None:
            return True
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True

    def _read_ledgers(self, case_name: str) -> dict[int, list[dict]]:
        ledgers = {}
        for r in range(self.world):
            path = os.path.join(self.run_dir, f"ledger-r{r}.jsonl")
            entries: list[dict] = []
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

    def _log_tail(self, lines: int = 15) -> str:
        out = []
        for path in (self.procs.log_paths if self.procs else []):
            try:
                with open(path, errors="replace") as fh:
                    out.append(f"[{os.path.basename(path)}] " + "".join(fh.readlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(out)

    # --- stop -------------------------------------------------------------------------------
    def stop(self) -> None:
        """Shut the ranks down (asked, then terminate, then kill, each bounded) and remove what the
        group left: its shared-memory segments and run folder. Safe to call again after a call
        that was interrupted half way: every step is idempotent, and only a completed stop counts."""
        if self._stopped:
            return
        for conn in self.conns.values():
            try:
                conn.send_bytes(msg.encode(msg.Shutdown()))
            except OSError:
                pass
        if self.procs is not None:
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
        from harness.runner.cleanup import kill_processes_with_env, unlink_shm_prefix

        # Whatever the launcher did not stop (a torchrun rank in its own session, a zygote): by
        # the group's own environment marker, so nothing of another group is touched.
        self.stragglers = kill_processes_with_env("HARNESS_RUN_DIR", self.run_dir)
        unlink_shm_prefix(self.shm_prefix)
        self.store = None
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self._stopped = True


def _dump_complete(text: str) -> bool:
    """A faulthandler dump of all threads is complete once the main thread's outermost frame is in:
    CPython lists the newest thread first and the main thread last."""
    lines = [line for line in text.rstrip().splitlines() if line.strip()]
    return bool(lines) and (lines[-1].endswith(" in <module>") or lines[-1].endswith(" in _run_module_as_main"))


def _fmt(entry) -> str:
    from harness.runner.ledger import format_entry
    return format_entry(entry) if entry else "(none)"


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the controller: stop, write what was gathered."""


def _install_signal_handlers():
    """SIGINT/SIGTERM raise :class:`Interrupted` once; a second signal during the clean-up that
    follows is noted and ignored, so it cannot abort the clean-up half way (orphan ranks, a
    leaked run folder) or the last report write."""
    received = []

    def handler(signum, frame):
        received.append(signal.Signals(signum).name)
        if len(received) == 1:
            raise Interrupted(received[0])

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
    return previous


def judge(case, results: dict, group_failures: list, isolated: dict | None, world: int) -> list[Failure]:
    failures = list(group_failures)
    for r in sorted(results):
        failures += results[r].failures
    if len(results) == world and not any(f.oracle == "cross-rank" for f in failures):
        ledgers = {r: results[r].collectives for r in results}
        divergence = first_divergence(ledgers)
        truncated = bool(divergence) and ledger_truncated(ledgers)
        if truncated and any(f.oracle in ("error", "liveness") for f in failures):
            pass    # a rank left the case early on a failure already reported; its short ledger adds nothing
        elif divergence:
            # A ledger that merely stops early belongs to the rank that died or hung.
            failures.append(Failure("liveness" if truncated else "cross-rank", divergence))
        elif case.model.recipe.reduce_amax:
            text = scale_disagreement({r: results[r].meta_fingerprints for r in results})
            if text:
                failures.append(Failure("cross-rank", text))
    if isolated:
        for r in sorted(results):
            alone = isolated.get(r)
            if alone is None:
                continue
            failures += [Failure("isolation", line, rank=r) for line in compare_runs(results[r], alone)]
    return failures


class CaseSession:
    """A persistent rank group for one run configuration, and the cases sent to it one by one.

    Used by ``run_controlled`` (the CLI) and by the pytest plugin (one test, one case). The group
    is started on first use; after a case that leaves communication in doubt (a cross-rank,
    liveness or error failure) it is recycled in place, and respawned when a rank died or hung
    or when in-place recycling fails. Start-up is retried at most twice.
    """

    MAX_START_ATTEMPTS = 3

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.group: RankGroup | None = None
        self.index = 0
        self.groups_started = 0
        self.previous = None
        self.stack = None          # loaded at the first case, for its declaration (capabilities)

    def _ensure_group(self) -> RankGroup:
        if self.group is not None:
            return self.group
        last = None
        for _ in range(self.MAX_START_ATTEMPTS):
            try:
                self.group = RankGroup(self.cfg).start()
                self.groups_started += 1
                return self.group
            except SetupError as exc:
                last = exc
        raise last

    def run(self, case) -> "CaseReport":
        from harness.runner.inproc import repro_for

        cfg = self.cfg
        if self.stack is None:
            self.stack = load_stack(cfg.sut, cfg.sut_options or None)
        reason = declined_by(self.stack, case, cfg.world_size)
        if reason is not None:      # decided here, once: the ranks never see the case
            return skipped(case.name, reason, repro_for(cfg, case))
        group = self._ensure_group()
        index = self.index
        self.index += 1
        outcome = group.run_case(index, case, cfg.options)
        isolated = None
        shared_broke = any(f.oracle in ("cross-rank", "liveness", "error")
                           for r in outcome.results.values() for f in r.failures)
        # Isolation compares a working case with itself alone; a case whose communication
        # already failed has nothing to compare (its verdict stands on that failure).
        if cfg.isolation and not outcome.broken and not shared_broke:
            iso = group.run_isolated(index, case, cfg.options)
            if iso.broken:
                outcome.failures.append(Failure("isolation", "the isolated run of this case broke its group:\n"
                                                + "\n".join(f.line() for f in iso.failures)))
                outcome.broken = True
            isolated = iso.results
        failures = judge(case, outcome.results, outcome.failures, isolated, cfg.world_size)
        res = list(outcome.results.values())
        report = verdict(
            case.name, failures, reuse_events=sum(r.reuse_events for r in res),
            reuse_misses=sum(r.reuse_misses for r in res),
            repro=repro_for(cfg, case, self.previous, failures),
            warnings=sorted({w for r in res for w in r.warnings}),
            steps_compared=sum(r.steps_compared for r in res), models_built=max([r.models_built for r in res] or [0]),
            digest=group_digest(outcome.results), duration_s=max([r.duration_s for r in res] or [0.0]),
            artifacts=outcome.artifacts)
        communication_failed = any(f.oracle in ("cross-rank", "liveness", "error") for f in failures)
        self.previous = None if communication_failed else case   # a recycled group remembers nothing
        # Only prechecked mismatches (no gloo error, no dead or hung rank): the process group is sound.
        gloo_touched = bool(outcome.failures) or any(
            f.oracle in ("liveness", "error") or (f.oracle == "cross-rank" and f.rank is not None
                                                  and "CollectiveMismatch" not in f.detail)
            for f in failures)
        if outcome.broken or (communication_failed and not group.recycle(new_group=gloo_touched)):
            self.restart()
        return report

    def restart(self) -> None:
        if self.group is not None:
            self.group.stop()
            self.group = None

    def close(self) -> None:
        self.restart()


def run_controlled(cfg: RunConfig, on_case=None) -> RunReport:
    """Every case of ``cfg`` in turn on one persistent group (recycled after failures)."""
    report = RunReport(cfg.sut, cfg.launcher, cfg.world_size, cfg.options.run_seed, cfg.options.reuse.text())
    previous = _install_signal_handlers()
    session = CaseSession(cfg)
    try:
        report.run_all(session, cfg.cases, on_case)
    except Interrupted as exc:
        report.interrupted = f"controller received {exc.args[0]}"
        # Said before the clean-up starts; from here on a further signal is noted and ignored.
        print(f"{exc.args[0]} received: stopping the ranks, then writing the reports "
              "(a further signal is ignored until they are written)", flush=True)
    except HarnessError as exc:
        # e.g. a replacement group that cannot start: the reports keep every finished case and say why
        report.interrupted = f"the run stopped: {exc}"
        raise
    finally:
        try:
            session.close()
            if report.interrupted and on_case is not None:
                on_case(report)      # the reports say the run was interrupted, with every finished case
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return report
