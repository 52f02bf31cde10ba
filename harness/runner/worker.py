"""The worker loop every launcher starts: one rank of a persistent group.

Started as ``python -m harness.runner.worker`` by the spawn launcher, by ``torchrun`` or by
``mpirun``; it learns its rank from the launcher's environment and everything else from
``HARNESS_*`` variables set by the controller. It imports nothing of the controller.

Order matters: imports and the stack first, then ``gc.freeze``, then the zygote is forked
(before any torch op and before gloo starts threads), then the controller connection and the
process group. A watchdog thread reports a rank that makes no progress, ends the rank when the
controller is gone (no orphans), and ``SIGUSR1`` dumps every thread's Python stack to this
rank's stack file (faulthandler, works even when the main thread is stuck in C).
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Client


def discover_rank() -> tuple[int, int]:
    env = os.environ
    for rank_var, size_var in (("RANK", "WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_var in env and size_var in env:
            return int(env[rank_var]), int(env[size_var])
    raise SystemExit("harness worker: no rank in the environment (RANK/WORLD_SIZE, PMI_RANK/PMI_SIZE)")


def _set_parent_death_signal() -> None:
    """Linux: die with SIGKILL when the parent dies (spawn launcher: the parent is the controller)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except Exception:
        pass


class Watchdog(threading.Thread):
    """Reports a stalled rank to the controller and ends the rank if the controller is gone."""

    def __init__(self, controller_pid: int, deadline_s: float, report):
        super().__init__(daemon=True, name="harness-watchdog")
        self.controller_pid = controller_pid
        self.deadline_s = deadline_s
        self.report = report
        self.busy_since: float | None = None
        self.case_index = -1
        self.last_progress = time.monotonic()
        self.reported = False

    def start_case(self, index: int) -> None:
        """A case begins: watch it (one report per case, naming the case's index)."""
        self.case_index = index
        self.reported = False
        self.progress()
        self.busy_since = time.monotonic()

    def progress(self) -> None:
        self.last_progress = time.monotonic()

    def run(self) -> None:
        from harness.idreuse.morgue import run_quietly

        run_quietly(self._round)

    def _round(self) -> None:
        try:
            os.kill(self.controller_pid, 0)
        except ProcessLookupError:
            os._exit(70)    # the controller died: never outlive it
        if self.busy_since is not None and not self.reported:
            idle = time.monotonic() - self.last_progress
            if idle > self.deadline_s + 2:
                self.reported = True
                self.report(idle, self.case_index)


def main() -> int:
    rank, world = discover_rank()
    env = os.environ
    if env.get("HARNESS_LAUNCHER") == "spawn":
        _set_parent_death_signal()
    run_dir = env["HARNESS_RUN_DIR"]
    stack_file = open(os.path.join(run_dir, f"stacks-r{rank}.txt"), "a")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    # A rank that crashes (SIGSEGV, SIGBUS, SIGABRT, SIGFPE) leaves its Python stack there too.
    faulthandler.enable(file=stack_file, all_threads=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the controller decides when ranks stop

    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist

    from harness.case.spec import CaseSpec
    from harness.idreuse.tracker import freeze_imports
    from harness.runner import messages as msg
    from harness.idreuse.morgue import MORGUE
    from harness.runner.case_exec import GRAVEYARD, LAST_REGISTRY_SIZES, RunOptions, execute_case
    from harness.runner.ledger import LEDGER, install
    from harness.runner.zygote import Zygote
    from harness.stacks import load_stack
    from harness.faults import fault_hook

    install()
    sut_options = {"inject": env["HARNESS_INJECT"]} if env.get("HARNESS_INJECT") else None
    stack = load_stack(env["HARNESS_SUT"], sut_options)
    deadline = float(env.get("HARNESS_DEADLINE", "10"))
    freeze_imports()
    zygote = Zygote().start()

    conn = Client(env["HARNESS_CONTROLLER"], family="AF_UNIX", authkey=bytes.fromhex(env["HARNESS_AUTHKEY"]))
    send_lock = threading.Lock()

    def send(m) -> None:
        with send_lock:
            conn.send_bytes(msg.encode(m))

    send(msg.Hello(rank=rank, world_size=world, pid=os.getpid()))
    watchdog = Watchdog(int(env["HARNESS_CONTROLLER_PID"]), deadline,
                        lambda idle, index: send(msg.Stalled(rank, idle, LEDGER.in_flight, index)))
    watchdog.start()
    LEDGER.open(os.path.join(run_dir, f"ledger-r{rank}.jsonl"))
    LEDGER.on_progress = watchdog.progress

    from harness.runner.precheck import CollectivePrecheck

    store = dist.TCPStore("127.0.0.1", int(env["HARNESS_STORE_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=max(30.0, deadline)))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg/", store), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=deadline))
    precheck = CollectivePrecheck(store, rank, deadline)
    generation = [0]
    LEDGER.precheck = precheck
    send(msg.Ready(rank=rank))
    try:
        while True:
            try:
                m = msg.decode(conn.recv_bytes())
            except (EOFError, OSError):
                break
            if isinstance(m, msg.Shutdown):
                break
            if isinstance(m, msg.Recycle):
                # A fresh group in the same processes: new process group, empty registries, no
                # parked objects. Used when the last case failed but every rank is responsive.
                stack.reset()
                LAST_REGISTRY_SIZES.forget()
                MORGUE.clear()
                GRAVEYARD.dead.clear()
                generation[0] = m.generation
                if m.new_group:
                    dist.destroy_process_group()
                    dist.init_process_group("gloo", store=dist.PrefixStore(f"pg{m.generation}/", store), rank=rank,
                                            world_size=world, timeout=datetime.timedelta(seconds=deadline))
                send(msg.Ready(rank=rank))
                continue
            case = CaseSpec.from_dict(m.case)
            if isinstance(m, msg.RunCase):
                watchdog.start_case(m.index)
                options = RunOptions.from_dict(m.options)
                precheck.begin_case(f"{generation[0]}/{m.index}")
                result = execute_case(case, stack, rank, world, dist.group.WORLD, options, fault_hook=fault_hook)
                precheck.end_case(len(result.collectives), failed=_left_with_error(result))
                watchdog.busy_since = None
                send(msg.CaseDone(m.index, rank, result.to_dict()))
            elif isinstance(m, msg.RunIsolated):
                answer = zygote.run({"case": m.case, "sut": env["HARNESS_SUT"], "sut_options": sut_options,
                                     "options": m.options, "rank": rank, "world_size": world,
                                     "store_port": int(env["HARNESS_STORE_PORT"]),
                                     "token": f"iso{generation[0]}-{m.index}"},
                                    timeout=deadline * 4 + 30)
                result = answer.get("ok") or {"case": case.name, "rank": rank,
                                              "failures": [{"oracle": "isolation", "rank": rank, "step": None,
                                                            "model": None,
                                                            "detail": f"isolated run failed: {answer.get('error')}"}]}
                send(msg.CaseDone(m.index, rank, result, isolated=True))
    finally:
        zygote.close()
        try:
            dist.destroy_process_group()
        except Exception:
            pass
    return 0


def _left_with_error(result) -> bool:
    """The case ended on an exception here: peers still waiting at the precheck are told so."""
    return any(f.oracle in ("error", "liveness") for f in result.failures)


if __name__ == "__main__":
    os.environ.setdefault("HARNESS_WORKER", "1")
    try:
        code = main()
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # os._exit, not sys.exit: a case may have left a non-daemon thread behind (reported as a
    # liveness failure), and interpreter shutdown would wait for it forever.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
