"""The SPMD backend: ``torchrun ... -m harness run`` and ``mpirun ... python -m harness run``.

The launcher started every rank; each runs the selected cases in order through the same case
pipeline and the same rank code as a controlled group (ledger, precheck, zygote for isolation).
Results go through the store, out of band: every rank publishes its own, rank 0 (the leader)
judges, writes the reports after every case, and publishes each decision the ranks must take
together (:meth:`SpmdBackend.agree`: whether to re-run the case alone, how to recycle). A rank
that stops making progress dumps its own Python stacks into the store (its watchdog), so rank 0
can report it; since the launcher owns the processes, a rank that stopped responding ends the
launch once the report is written: use the controller mode (``--launcher torchrun`` from a plain
shell) to keep going after hangs.

Rendezvous: under torchrun, the agent's store (``MASTER_ADDR``/``MASTER_PORT``), which also
works across nodes (``--nnodes N --node-rank I --master-addr HOST``); under mpirun, rank 0 hosts
a store on a port the OS chooses and broadcasts it with mpi4py.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import socket
import tempfile

from harness.errors import SetupError
from harness.hangs import flight_recorder
from harness.oracles.findings import ISOLATED_RUN_FAILED, Failure, Oracle
from harness.runner.judge import GroupOutcome, Recycle
from harness.runner.pipeline import GroupLost
from harness.runner.placement import host_name, one_host_reason
from harness.runner.rank.execute import execute_case
from harness.runner.rank.group_death import begin_group, end_group
from harness.runner.rank.result import RankResult
from harness.runner.rank.state import RankState
from harness.runner.rank.watchdog import Watchdog, die_with_parent
from harness.runner.rank.zygote import Zygote, isolated_request, isolated_timeout

__harness_hidden__ = True

REPORT_GRACE_S = 10.0      # beyond the deadline, how long rank 0 waits for a rank that says nothing


def _connect_store(env, deadline_s: float):
    """The launch's store, and where a zygote's child finds it again (host, port, key prefix)."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=max(60.0, deadline_s))
    if env.launcher == "torchrun":
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        prefix = f"harness-{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
        return dist.PrefixStore(prefix, store), None, host, port, prefix
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    host_store = None
    where = None
    if env.rank == 0:
        host_store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
        where = (host_name(), os.environ.get("HARNESS_STORE_HOST") or socket.gethostname(), host_store.port)
    leader_host, address, port = comm.bcast(where, root=0)
    # On rank 0's host the store is at the loopback address; from another host, at rank 0's name
    # ($HARNESS_STORE_HOST where host names do not resolve between the nodes).
    host = "127.0.0.1" if leader_host == host_name() else address
    store = host_store or dist.TCPStore(host, port, is_master=False, timeout=timeout)
    return store, host_store, host, port, ""


class SpmdBackend:
    def __init__(self, cfg, env, stack=None):
        import torch
        import torch.distributed as dist

        from harness.idreuse.tracker import freeze_imports

        torch.set_num_threads(1)
        die_with_parent(os.getppid())      # a launch killed outright leaves no rank behind
        if cfg.world_size != env.world_size:
            raise SetupError(f"--world-size {cfg.world_size} but {env.launcher} started {env.world_size} ranks")
        self.cfg, self.env = cfg, env
        self.rank, self.world_size = env.rank, env.world_size
        self.leader = env.rank == 0
        deadline = cfg.deadline_s
        self.state = RankState.load(cfg.rank_settings(), env.rank, stack)
        freeze_imports()
        self.zygote = Zygote(self.state).start() if cfg.isolation else None
        store, self._host_store, host, port, prefix = _connect_store(env, deadline)
        if self.leader:
            store.set("run-id", str(store.add("harness-run-counter", 1)))
        run_id = store.get("run-id").decode()
        self.store = dist.PrefixStore(f"run{run_id}/", store)
        self.store_at = {"host": host, "port": port, "prefix": f"{prefix}run{run_id}/"}
        self.store.set(f"host/{self.rank}", host_name())
        # The flight recorder keeps each rank's last collectives for a hang report; it must be on
        # before the first process group is made (unless the launch's environment chose a size).
        os.environ.update(flight_recorder.environment())
        self.state.join_group(self.store, prefix="pg0/")
        self.watchdog = Watchdog(deadline, self._dump_own_stacks)
        self.state.ledger.on_progress = self.watchdog.progress
        self.watchdog.start()
        self.long_wait = datetime.timedelta(seconds=isolated_timeout(deadline))
        self._hosts: dict[int, str] | None = None
        self._case_name = ""

    def _key(self, index: int) -> str:
        return f"{self.state.generation}/{index}"

    def _dump_own_stacks(self, idle_s: float, key: str) -> None:
        """The watchdog's report of a stalled rank: its Python stacks and its flight recorder, into
        the store, where rank 0 reads them when this rank's result does not come (the launcher
        owns the processes, so nobody else can ask)."""
        with tempfile.TemporaryFile("w+") as fh:
            faulthandler.dump_traceback(fh, all_threads=True)
            fh.seek(0)
            stacks = fh.read()
        recorder = flight_recorder.format_dump(flight_recorder.dump(frames=False))
        self.store.set(f"stack/{key}/{self.rank}", f"{stacks}\n--- flight recorder ---\n{recorder}")
        # In place of the case's result, so that rank 0 reports the stall now (deadline + the
        # watchdog's margin) rather than after its own longer wait for a result.
        self.store.set(f"res/{key}/{self.rank}", json.dumps({"stalled_s": round(idle_s, 1)}))

    # --- the backend ---------------------------------------------------------------------------
    def run_shared(self, index: int, case, meanwhile=None) -> GroupOutcome:
        from harness.faults import fault_hook

        key, state = self._key(index), self.state
        self._case_name = case.name
        self.watchdog.watch(key)
        birth = begin_group(state)
        state.begin_case(key)
        result = execute_case(case, state, fault_hook=fault_hook)
        state.end_case(len(result.collectives), failed=result.left_with_error())
        end_group(state, case, result, birth)
        self.watchdog.idle()
        self.store.set(f"res/{key}/{self.rank}", json.dumps(result.to_dict()))
        if not self.leader:
            return GroupOutcome({self.rank: result}, [])
        results, failures = {}, []
        report_wait = datetime.timedelta(seconds=self.cfg.deadline_s + REPORT_GRACE_S)
        for r in range(self.world_size):
            try:
                answer = json.loads(self._get(f"res/{key}/{r}", report_wait))
            except Exception:
                answer = None
            if answer is not None and "stalled_s" not in answer:
                results[r] = RankResult.from_dict(answer)
                continue
            stacks = ""
            if self.store.check([f"stack/{key}/{r}"]):
                stacks = self.store.get(f"stack/{key}/{r}").decode()
            if answer is not None:      # its watchdog spoke for it (see _dump_own_stacks)
                why = f"rank {r} made no progress for {answer['stalled_s']:.1f} s (deadline {self.cfg.deadline_s:g} s)"
            else:
                why = f"rank {r} did not report within the deadline ({self.cfg.deadline_s:g} s) + {REPORT_GRACE_S:g} s"
            failures.append(Failure(Oracle.LIVENESS, f"{why}\n{stacks}", rank=r, kind="a rank made no progress"))
        return GroupOutcome(results, failures, broken=len(results) < self.world_size)

    def run_isolated(self, index: int, case) -> GroupOutcome:
        key = self._key(index)
        answer = self.zygote.run(isolated_request(case, f"iso{key}", self.store_at),
                                 timeout=isolated_timeout(self.cfg.deadline_s))
        self.store.set(f"iso/{key}/{self.rank}", json.dumps(answer))
        if not self.leader:
            return GroupOutcome({}, [])
        results, failures = {}, []
        for r in range(self.world_size):
            try:
                answer = json.loads(self._get(f"iso/{key}/{r}", self.long_wait))
            except Exception:
                continue
            if "ok" in answer:
                results[r] = RankResult.from_dict(answer["ok"])
            else:
                failures.append(Failure(Oracle.ISOLATION, f"isolated run failed: {answer['error']}", rank=r,
                                        kind=ISOLATED_RUN_FAILED))
        return GroupOutcome(results, failures)

    def agree(self, key: str, decide) -> str:
        full = f"agree/{self.state.generation}/{key}"
        if self.leader:
            value = decide()
            self.store.set(full, value)
            return value
        return self._get(full, self.long_wait).decode()

    def _get(self, key: str, timeout: datetime.timedelta) -> bytes:
        """A key some rank sets, waited for with ``timeout`` (the store's own timeout is the
        precheck's, the deadline, and stays so)."""
        self.store.wait([key], timeout)
        return self.store.get(key)

    def recycle(self, plan: Recycle) -> None:
        if plan is Recycle.RESPAWN:
            raise GroupLost(f"a rank stopped responding in case {self._case_name!r}; the launch cannot go on")
        if plan is Recycle.KEEP:
            return
        self.state.reset()
        if plan is Recycle.GROUP:
            self.state.renew_group(self.state.generation + 1)

    @property
    def stack(self):
        return self.state.stack

    def skip_reason(self, case) -> str | None:
        return one_host_reason(case, self.hosts, self.state.stack)

    def hosts(self) -> dict[int, str]:
        if self._hosts is None:
            self._hosts = {r: self._get(f"host/{r}", self.long_wait).decode() for r in range(self.world_size)}
        return self._hosts

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None
        self.state.leave_group()

