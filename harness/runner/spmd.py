"""SPMD mode: ``torchrun ... -m harness run`` and ``mpirun ... python -m harness run``.

The launcher started every rank; each runs the selected cases in order, with the same worker
code as a controlled group (ledger, precheck, zygote for isolation). Verdicts are agreed out of
band through the store: every rank publishes its result, rank 0 judges, writes the JSON (and
JUnit) report after every case, and publishes the verdict the other ranks wait for. After a
case that leaves communication in doubt every rank starts a fresh process group and empties its
registries. A rank that stops making progress dumps its own Python stack into the store (its
watchdog thread), so rank 0 can report it; since the launcher owns the processes, a hang ends
the launch after the report is written: use the controller mode (``--launcher torchrun`` without
running under torchrun) to keep going after hangs.

Rendezvous: under torchrun, the agent's store (``MASTER_ADDR``/``MASTER_PORT``); under mpirun,
rank 0 hosts a store on a port the OS chooses and broadcasts it with mpi4py.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import json
import os
import tempfile
import threading
import time


@dataclasses.dataclass
class SpmdEnv:
    launcher: str
    rank: int
    world_size: int


def spmd_environment() -> SpmdEnv | None:
    if os.environ.get("HARNESS_WORKER") == "1":
        return None
    if "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ:
        return SpmdEnv("torchrun", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_var in os.environ and size_var in os.environ:
            return SpmdEnv("mpirun", int(os.environ[rank_var]), int(os.environ[size_var]))
    return None


def exit_together(env: SpmdEnv, line: str, code: int, timeout_s: float = 30.0) -> None:
    """Bad input seen by every rank of an SPMD launch: each prints ``line`` once and exits ``code``.

    torchrun's agent terminates the other ranks as soon as one exits with an error, so a rank
    that exits first could have a slower peer killed before it said anything. Under torchrun
    the ranks therefore ignore SIGTERM and leave together, after a bounded barrier on the
    agent's store (a rank that never arrives costs ``timeout_s``, not a hang). mpirun (hydra)
    lets every rank finish on its own, so there each rank just leaves.
    """
    import signal
    import sys

    if env.launcher == "torchrun":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(line, file=sys.stderr, flush=True)
    if env.launcher == "torchrun" and env.world_size > 1:
        try:
            import torch.distributed as dist

            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                  timeout=datetime.timedelta(seconds=timeout_s))
            key = f"harness-{os.environ.get('TORCHELASTIC_RUN_ID', '')}/bad-input"
            if store.add(key, 1) >= env.world_size:
                store.set(key + "/all", "1")
            store.wait([key + "/all"], datetime.timedelta(seconds=timeout_s))
        except Exception:
            pass   # no store, or a rank that never came: leave anyway
    sys.stdout.flush()
    os._exit(code)


def _connect_store(env: SpmdEnv, deadline_s: float):
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
    port = None
    if env.rank == 0:
        host_store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
        port = host_store.port
    port = comm.bcast(port, root=0)
    store = host_store or dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    return store, host_store, "127.0.0.1", port, ""


class _SelfWatch(threading.Thread):
    """Dumps this rank's stack into the store when a case makes no progress for too long."""

    def __init__(self, store, rank: int, deadline_s: float):
        super().__init__(daemon=True, name="harness-selfwatch")
        self.store, self.rank, self.deadline_s = store, rank, deadline_s
        self.case_key: str | None = None
        self.last_progress = time.monotonic()

    def progress(self) -> None:
        self.last_progress = time.monotonic()

    def run(self) -> None:
        from harness.idreuse.morgue import run_quietly

        run_quietly(self._round)

    def _round(self) -> None:
        key = self.case_key
        if key and time.monotonic() - self.last_progress > self.deadline_s + 2:
            with tempfile.TemporaryFile("w+") as fh:
                faulthandler.dump_traceback(fh, all_threads=True)
                fh.seek(0)
                self.store.set(f"stack/{key}/{self.rank}", fh.read())
            self.case_key = None


def run_spmd(cfg, env: SpmdEnv, on_case):
    """Run ``cfg.cases`` as rank ``env.rank``; rank 0 returns the RunReport, others return theirs too."""
    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist

    from harness.errors import SetupError
    from harness.idreuse.morgue import MORGUE
    from harness.idreuse.tracker import freeze_imports
    from harness.oracles.findings import Failure
    from harness.report.model import RunReport, group_digest, skipped, verdict
    from harness.runner.case_exec import GRAVEYARD, LAST_REGISTRY_SIZES, RankResult, execute_case
    from harness.runner.controller import judge
    from harness.runner.inproc import repro_for
    from harness.runner.ledger import LEDGER, install
    from harness.runner.precheck import CollectivePrecheck
    from harness.runner.zygote import Zygote
    from harness.stacks import load_stack
    from harness.stacks.capabilities import declined_by
    from harness.faults import fault_hook

    if cfg.world_size != env.world_size:
        raise SetupError(f"--world-size {cfg.world_size} but {env.launcher} started {env.world_size} ranks")
    rank, world = env.rank, env.world_size
    deadline = cfg.options.deadline_s
    install()
    stack = load_stack(cfg.sut, cfg.sut_options or None)
    freeze_imports()
    zygote = Zygote().start() if cfg.isolation else None
    store, host_store, store_host, store_port, store_prefix = _connect_store(env, deadline)
    run_id = store.add("harness-run-counter", 1) if rank == 0 else None
    if rank == 0:
        store.set("run-id", str(run_id))
    run_id = store.get("run-id").decode()
    store = dist.PrefixStore(f"run{run_id}/", store)
    pg_timeout = datetime.timedelta(seconds=deadline)
    dist.init_process_group("gloo", store=dist.PrefixStore("pg0/", store), rank=rank, world_size=world,
                            timeout=pg_timeout)
    precheck = CollectivePrecheck(store, rank, deadline)
    LEDGER.precheck = precheck
    watch = _SelfWatch(store, rank, deadline)
    LEDGER.on_progress = watch.progress
    watch.start()
    report = RunReport(cfg.sut, env.launcher, world, cfg.options.run_seed, cfg.options.reuse.text())
    generation = 0
    previous = None
    wait_timeout = datetime.timedelta(seconds=deadline * 4 + 30)
    try:
        for index, case in enumerate(cfg.cases):
            reason = declined_by(stack, case, world)
            if reason is not None:
                # Every rank decides alike (a pure function of the case), so none runs it.
                if rank == 0:
                    report.cases.append(skipped(case.name, reason, repro_for(cfg, case)))
                    if on_case is not None:
                        on_case(report)
                continue
            key = f"{generation}/{index}"
            watch.progress()
            watch.case_key = key
            precheck.begin_case(key)
            result = execute_case(case, stack, rank, world, dist.group.WORLD, cfg.options, fault_hook=fault_hook)
            precheck.end_case(len(result.collectives),
                              failed=any(f.oracle in ("error", "liveness") for f in result.failures))
            watch.case_key = None
            store.set(f"res/{key}/{rank}", json.dumps(result.to_dict()))
            if zygote is not None:
                answer = zygote.run({"case": case.to_dict(), "sut": cfg.sut, "sut_options": cfg.sut_options,
                                     "options": cfg.options.to_dict(), "rank": rank, "world_size": world,
                                     "store_host": store_host, "store_port": store_port,
                                     "store_prefix": f"{store_prefix}run{run_id}/", "token": f"iso{key}"},
                                    timeout=deadline * 4 + 30)
                store.set(f"iso/{key}/{rank}", json.dumps(answer))
            if rank == 0:
                results, failures = {}, []
                store.set_timeout(datetime.timedelta(seconds=deadline + 10))
                for r in range(world):
                    try:
                        results[r] = RankResult.from_dict(json.loads(store.get(f"res/{key}/{r}")))
                    except Exception:
                        stack_text = ""
                        if store.check([f"stack/{key}/{r}"]):
                            stack_text = store.get(f"stack/{key}/{r}").decode()
                        failures.append(Failure("liveness", f"rank {r} did not report within the deadline "
                                                            f"({deadline:g} s) + 10 s\n{stack_text}", rank=r))
                store.set_timeout(wait_timeout)
                isolated = None
                if zygote is not None:
                    isolated = {}
                    for r in range(world):
                        try:
                            answer = json.loads(store.get(f"iso/{key}/{r}"))
                        except Exception:
                            continue
                        if "ok" in answer:
                            isolated[r] = RankResult.from_dict(answer["ok"])
                        else:
                            failures.append(Failure("isolation", f"isolated run failed: {answer['error']}", rank=r))
                all_failures = judge(case, results, failures, isolated, world)
                res = list(results.values())
                report.cases.append(verdict(
                    case.name, all_failures, reuse_events=sum(r.reuse_events for r in res),
                    reuse_misses=sum(r.reuse_misses for r in res),
                    repro=repro_for(cfg, case, previous, all_failures),
                    warnings=sorted({w for r in res for w in r.warnings}),
                    steps_compared=sum(r.steps_compared for r in res),
                    models_built=max([r.models_built for r in res] or [0]),
                    digest=group_digest(results), duration_s=max([r.duration_s for r in res] or [0.0])))
                if on_case is not None:
                    on_case(report)
                lost = len(results) < world
                recycle = any(f.oracle in ("cross-rank", "liveness", "error") for f in all_failures)
                store.set(f"verdict/{key}", "lost" if lost else ("recycle" if recycle else "ok"))
            decision = store.get(f"verdict/{key}").decode()
            previous = case if decision == "ok" else None
            if decision == "lost":
                report.interrupted = f"a rank stopped responding in case {case.name!r}; the launch cannot go on"
                break
            if decision == "recycle":
                generation += 1
                dist.destroy_process_group()
                stack.reset()
                LAST_REGISTRY_SIZES.forget()
                MORGUE.clear()
                GRAVEYARD.dead.clear()
                dist.init_process_group("gloo", store=dist.PrefixStore(f"pg{generation}/", store), rank=rank,
                                        world_size=world, timeout=pg_timeout)
        else:
            report.complete = True
    finally:
        if zygote is not None:
            zygote.close()
        try:
            dist.destroy_process_group()
        except Exception:
            pass
    if rank != 0:
        return None
    return report
