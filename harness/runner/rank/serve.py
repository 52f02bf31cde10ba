"""A controlled rank: loads the run's settings and stack, connects, and serves the controller.

Imported by :mod:`harness.runner.rank.worker` once faulthandler is set up. The watchdog
(:mod:`harness.runner.rank.watchdog`) reports a rank that makes no progress and ends the rank
when the controller is gone (no orphans).
"""

from __future__ import annotations

import datetime
import os
import threading
from multiprocessing.connection import Client

import torch
import torch.distributed as dist

from harness.case.spec import CaseSpec
from harness.collectives.exchange import SocketExchange, connect_peers
from harness.faults import fault_hook
from harness.idreuse.tracker import freeze_imports
from harness.phases import mark
from harness.runner import messages as msg
from harness.runner.address import from_environment
from harness.runner.placement import host_name
from harness.runner.rank.execute import execute_case
from harness.runner.rank.group_death import begin_group, end_group
from harness.runner.rank.settings import RankSettings
from harness.runner.rank.state import RankState
from harness.runner.rank.watchdog import Watchdog
from harness.runner.rank.zygote import IsolatedRuns, Zygote, isolated_failure, isolated_request

__harness_hidden__ = True

torch.set_num_threads(1)


class Worker:
    """One rank's side of the controller protocol: a table from message kind to handler.

    Order matters: the stack's imports first (module import and :meth:`RankState.load`), then
    ``gc.freeze``, then the zygote is forked (before any torch op and before gloo starts
    threads), then the controller connection and the process group (:meth:`connect`).
    """

    def __init__(self, rank: int, world: int, run_dir: str):
        self.rank, self.world, self.run_dir = rank, world, run_dir
        self.state = RankState.load(RankSettings.read(run_dir), rank)
        freeze_imports()
        self.zygote = Zygote(self.state).start()
        mark(f"rank {rank}: zygote forked")
        self.isolated = IsolatedRuns(self.zygote, self.state, self._isolated_request)
        self.conn = None
        self.exchange = None
        self._send_lock = threading.Lock()

    def send(self, m) -> None:
        with self._send_lock:
            self.conn.send_bytes(msg.encode(m))

    def connect(self) -> None:
        env = os.environ
        state = self.state
        self.conn = Client(from_environment(env["HARNESS_CONTROLLER"]), family="AF_UNIX",
                           authkey=bytes.fromhex(env["HARNESS_AUTHKEY"]))
        self.send(msg.Hello(rank=self.rank, world_size=self.world, pid=os.getpid(), host=host_name()))
        from harness.hangs import report as hang_report

        answered = hang_report.ServeState()
        self.watchdog = Watchdog(state.settings.deadline_s,
                                 lambda idle, index: self.send(msg.Stalled(self.rank, idle, state.ledger.in_flight, index)),
                                 controller_pid=int(env["HARNESS_CONTROLLER_PID"]),
                                 on_round=lambda: hang_report.serve(self.run_dir, self.rank, answered))
        self.watchdog.start()
        state.ledger.open(os.path.join(self.run_dir, f"ledger-r{self.rank}.jsonl"))
        state.ledger.on_progress = self.watchdog.progress
        store = dist.TCPStore("127.0.0.1", int(env["HARNESS_STORE_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=max(30.0, state.settings.deadline_s)))
        # Every rank of a controlled group is on this host: the precheck talks over direct sockets
        # rather than through the controller's store (harness.collectives.exchange).
        if state.settings.precheck and self.world > 1:
            peers = connect_peers(os.path.basename(self.run_dir), self.rank, self.world, store,
                                  state.settings.deadline_s)
            self.exchange = SocketExchange(peers, state.settings.deadline_s)
        state.join_group(store, exchange=self.exchange)
        mark(f"rank {self.rank}: process group joined")
        self.send(msg.Ready(rank=self.rank))

    # --- the loop ------------------------------------------------------------------------------
    def serve(self) -> None:
        handlers = {msg.RunCase: self.run_case, msg.RunIsolated: self.run_isolated, msg.Recycle: self.recycle}
        while True:
            try:
                m = msg.decode(self.conn.recv_bytes())
            except (EOFError, OSError):
                return
            if not isinstance(m, msg.RunIsolated):
                self.isolated.cancel()     # begun alongside a case whose isolated run was not wanted
            if isinstance(m, msg.Shutdown):
                return
            handler = handlers.get(type(m))
            if handler is None:
                raise msg.ProtocolError(f"rank {self.rank} cannot handle a {type(m).__name__} message")
            handler(m)

    def run_case(self, m) -> None:
        state = self.state
        case = CaseSpec.from_dict(m.case)
        if state.settings.starts_isolated_with_shared(case):
            self.isolated.begin(m.index, case)
        self.watchdog.watch(m.index)
        birth = begin_group(state)
        state.begin_case(f"{state.generation}/{m.index}")
        mark(f"rank {self.rank}: case {case.name} started")
        result = execute_case(case, state, fault_hook=fault_hook)
        mark(f"rank {self.rank}: case {case.name} ran")
        state.end_case(len(result.collectives), failed=result.left_with_error())
        end_group(state, case, result, birth)
        self.watchdog.idle()
        self.send(msg.CaseDone(m.index, self.rank, result.to_dict()))

    def run_isolated(self, m) -> None:
        case = CaseSpec.from_dict(m.case)
        answer = self.isolated.end(m.index, case)
        mark(f"rank {self.rank}: isolated run of {case.name} answered")
        result = answer.get("ok") or isolated_failure(case.name, self.rank, answer.get("error"))
        self.send(msg.CaseDone(m.index, self.rank, result, isolated=True))

    def recycle(self, m) -> None:
        """A fresh group in the same processes: empty registries, no parked objects and, unless
        the precheck kept every mismatch out of gloo, a new process group."""
        self.state.reset()
        self.state.generation = m.generation
        if m.new_group:
            self.state.renew_group(m.generation)
        self.send(msg.Ready(rank=self.rank))

    def _isolated_request(self, index: int, case) -> dict:
        store = {"host": "127.0.0.1", "port": int(os.environ["HARNESS_STORE_PORT"]), "prefix": ""}
        return isolated_request(case, f"iso{self.state.generation}-{index}", store)

    def close(self) -> None:
        self.zygote.close()
        self.state.leave_group()
        if self.exchange is not None:
            self.exchange.close()
