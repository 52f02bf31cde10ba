"""The worker every launcher starts: one rank of a controlled, persistent group.

Started as ``python -m harness.runner.rank.worker`` by the spawn launcher, by ``torchrun`` or
by ``mpirun``; it learns its rank from the launcher's environment, where its controller is from
``HARNESS_*`` variables, and the run's settings from the group's run folder, once. It imports
nothing of the controller.

This module only sets up what must come before any import of torch: the rank's stack file,
where ``SIGUSR1`` makes faulthandler dump every thread's Python stack (it works even when the
main thread is stuck in C code) and where a crash leaves the crashing thread's stack
(:func:`install_stack_dumps`). The rank itself is
:class:`harness.runner.rank.serve.Worker`.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

__harness_hidden__ = True


def discover_rank() -> tuple[int, int]:
    env = os.environ
    for rank_var, size_var in (("RANK", "WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_var in env and size_var in env:
            return int(env[rank_var]), int(env[size_var])
    raise SystemExit("harness worker: no rank in the environment (RANK/WORLD_SIZE, PMI_RANK/PMI_SIZE)")


def install_stack_dumps(stack_file) -> None:
    """``SIGUSR1``: every thread's Python stack into ``stack_file`` (the controller asks a hung
    rank for it). A crash (SIGSEGV, SIGBUS, SIGABRT, SIGFPE): the crashing thread's stack.

    Only the crashing thread's, because faulthandler reads every other thread's frames while
    those threads go on running (a crash in C code, such as a native kernel, has released the
    GIL): a thread that is running Python at that moment can make the dump itself crash after
    that thread's header, and the process dies before the crashing thread, which CPython lists
    last, is written. Seen once in the segfault fault case: the dead rank's file ended at the
    header of its other thread, without the crashing frame."""
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    faulthandler.enable(file=stack_file, all_threads=False)


def main() -> int:
    rank, world = discover_rank()
    env = os.environ
    from harness.phases import mark        # torch-free

    mark(f"rank {rank}: process started")
    if env.get("HARNESS_LAUNCHER") == "spawn":
        from harness.runner.rank.watchdog import die_with_parent   # torch-free

        die_with_parent(int(env["HARNESS_CONTROLLER_PID"]))
    run_dir = env["HARNESS_RUN_DIR"]
    install_stack_dumps(open(os.path.join(run_dir, f"stacks-r{rank}.txt"), "a"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the controller decides when ranks stop
    from harness.runner.rank.serve import Worker   # torch, the harness and the stack: after faulthandler

    worker = Worker(rank, world, run_dir)
    try:
        worker.connect()
        worker.serve()
    finally:
        worker.close()
    return 0


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
