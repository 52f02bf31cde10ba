"""Run functions on N spawned ranks and collect what each returned or raised, with bounds.

Two ways, same results (one :class:`RankOutcome` per rank, in rank order):

* :func:`run_ranks` starts fresh processes for one function;
* :class:`RankGroup` keeps the processes and runs one function after another on them,
  because starting a rank costs seconds (``import torch`` alone takes 1.5 to 3 s here).
  A rank that dies or a task that overruns breaks the group: its processes are stopped,
  and the failed task is reported per rank.

Each rank runs ``target(rank, world_size, **kwargs)`` in a ``spawn`` process (never fork:
a forked torch is not safe to use). ``target`` must be a module-level function the
children can import. The return value, or the exception (pickled in the child, so a
failure to pickle is reported by name rather than lost) with its traceback text, comes
back; a rank that exits without answering is "died" with its exit code. Every process is
joined with a timeout, then terminated, then killed, each step bounded, so no rank
outlives its group. Used by :func:`harness.comm.bench.measure_overlap` and the tests.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import multiprocessing
import pickle
import queue
import time
import traceback
from typing import Any, Callable

from harness.errors import HarnessError

_POLL_S = 0.05
_STOP_WAIT_S = 2.0
_DEAD_GRACE_S = 0.5
_IDLE_EXIT_S = 600.0      # a group rank whose controller vanished exits after this long


@dataclasses.dataclass
class RankOutcome:
    """What one rank did: ``status`` is ``"ok"``, ``"error"``, ``"died"`` or ``"timeout"``."""

    rank: int
    status: str
    value: Any = None
    error: BaseException | None = None
    traceback: str = ""
    exitcode: int | None = None
    pid: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "ok":
            return f"rank {self.rank}: ok"
        if self.status == "error":
            return f"rank {self.rank} raised {type(self.error).__name__}: {self.error}\n{self.traceback}"
        return f"rank {self.rank} (pid {self.pid}) {self.status} (exit code {self.exitcode})"


def _call(target: Callable, rank: int, world_size: int, kwargs: dict) -> tuple[str, bytes, str]:
    """Run the target; return (status, pickled value or exception, traceback text)."""
    try:
        value = target(rank, world_size, **kwargs)
    except BaseException as exc:
        text = traceback.format_exc()
        try:
            blob = pickle.dumps(exc)
            pickle.loads(blob)
        except Exception:
            blob = pickle.dumps(HarnessError(f"{type(exc).__name__} (can't serialize {type(exc).__name__}): {exc}"))
        return "error", blob, text
    try:
        return "ok", pickle.dumps(value), ""
    except Exception as exc:
        return "error", pickle.dumps(HarnessError(
            f"rank {rank} returned a value that can't be pickled: {type(value).__name__} ({exc})")), ""


def _prepare(threads: int | None) -> None:
    faulthandler.enable()
    if threads is not None:
        import torch
        torch.set_num_threads(threads)


def _rank_main(target: Callable, rank: int, world_size: int, kwargs: dict, results, threads: int | None) -> None:
    _prepare(threads)
    results.put((0, rank) + _call(target, rank, world_size, kwargs))
    results.close()
    results.join_thread()


def _group_main(rank: int, world_size: int, tasks, results, threads: int | None, barrier) -> None:
    _prepare(threads)
    while True:
        try:
            task = tasks.get(timeout=_IDLE_EXIT_S)
        except queue.Empty:
            return
        if task is None:
            break
        task_id, target, kwargs, with_barrier = task
        if with_barrier:
            kwargs = dict(kwargs, barrier=barrier)
        results.put((task_id, rank) + _call(target, rank, world_size, kwargs))
    results.close()
    results.join_thread()


def _stop(process) -> None:
    """Terminate, then kill, each wait bounded, so a stuck kill cannot hang the caller."""
    if process.is_alive():
        process.terminate()
        process.join(_STOP_WAIT_S)
    if process.is_alive():
        process.kill()
        process.join(_STOP_WAIT_S)


def _collect(results, processes: list, task_id: int, timeout_s: float) -> dict[int, RankOutcome]:
    """Answers to ``task_id`` until every rank answered, the silent ones are all dead, or
    the time is up."""
    outcomes: dict[int, RankOutcome] = {}
    deadline = time.monotonic() + timeout_s
    dead_since: float | None = None
    while len(outcomes) < len(processes) and time.monotonic() < deadline:
        try:
            answer_id, rank, status, blob, text = results.get(timeout=_POLL_S)
        except queue.Empty:
            silent = [p for r, p in enumerate(processes) if r not in outcomes]
            if all(not p.is_alive() for p in silent):
                dead_since = dead_since or time.monotonic()    # let the pipe drain, then give up
                if time.monotonic() - dead_since > _DEAD_GRACE_S:
                    break
            continue
        if answer_id != task_id:
            continue
        obj = pickle.loads(blob)
        outcomes[rank] = RankOutcome(rank, "ok", value=obj) if status == "ok" else \
            RankOutcome(rank, "error", error=obj, traceback=text)
    return outcomes


def _finish(processes: list, outcomes: dict[int, RankOutcome]) -> list[RankOutcome]:
    ordered = []
    for rank, p in enumerate(processes):
        outcome = outcomes.get(rank)
        if outcome is None:
            outcome = RankOutcome(rank, "timeout" if p.is_alive() else "died")
        outcome.exitcode = p.exitcode
        outcome.pid = p.pid
        ordered.append(outcome)
    return ordered


def run_ranks(
    target: Callable,
    world_size: int,
    kwargs: dict | None = None,
    *,
    timeout_s: float = 60.0,
    threads: int | None = 1,
    barrier: bool = False,
) -> list[RankOutcome]:
    """Run ``target(rank, world_size, **kwargs)`` once on ``world_size`` fresh processes.

    ``threads`` sets ``torch.set_num_threads`` in each rank first (None leaves it).
    ``barrier=True`` adds ``barrier=``, a ``multiprocessing.Barrier`` of the ranks, to
    kwargs. Ranks still running after ``timeout_s`` are stopped and reported as "timeout".
    """
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    kwargs = dict(kwargs or {})
    if barrier:
        kwargs["barrier"] = ctx.Barrier(world_size)
    processes = [ctx.Process(target=_rank_main, args=(target, rank, world_size, kwargs, results, threads),
                             name=f"rank{rank}") for rank in range(world_size)]
    try:
        for p in processes:
            p.start()
        outcomes = _collect(results, processes, 0, timeout_s)
        end = time.monotonic() + _STOP_WAIT_S
        for p in processes:
            p.join(max(0.05, end - time.monotonic()))
        ordered = _finish(processes, outcomes)
    finally:
        for p in processes:
            _stop(p)
        results.close()
        results.cancel_join_thread()
    for outcome, p in zip(ordered, processes):
        outcome.exitcode = p.exitcode
    return ordered


class RankGroup:
    """``world_size`` persistent spawned ranks that run one function after another.

    Use as a context manager; :meth:`run` has the same contract as :func:`run_ranks`. If
    any rank fails to answer (died, or overran ``timeout_s``), the group is stopped and
    :attr:`broken` says why; later runs raise HarnessError.
    """

    def __init__(self, world_size: int, *, threads: int | None = 1):
        ctx = multiprocessing.get_context("spawn")
        self.world_size = world_size
        self.broken: str | None = None
        self._task_id = 0
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(world_size)]
        self._barrier = ctx.Barrier(world_size)
        self.processes = [ctx.Process(target=_group_main, name=f"rank{rank}",
                                      args=(rank, world_size, self._tasks[rank], self._results, threads,
                                            self._barrier))
                          for rank in range(world_size)]
        try:
            for p in self.processes:
                p.start()
        except BaseException:
            self.close()
            raise

    def run(self, target: Callable, kwargs: dict | None = None, *, timeout_s: float = 60.0,
            barrier: bool = False) -> list[RankOutcome]:
        if self.broken is not None:
            raise HarnessError(f"rank group is broken ({self.broken}); start a new one")
        self._task_id += 1
        for q in self._tasks:
            q.put((self._task_id, target, dict(kwargs or {}), barrier))
        outcomes = _collect(self._results, self.processes, self._task_id, timeout_s)
        ordered = _finish(self.processes, outcomes)
        bad = [o for o in ordered if o.status in ("died", "timeout")]
        if bad:
            self.broken = "; ".join(o.describe() for o in bad) + f" while running {getattr(target, '__name__', target)}"
            self.close()
            for outcome, p in zip(ordered, self.processes):
                outcome.exitcode = p.exitcode
        return ordered

    def close(self) -> None:
        """Ask the ranks to exit; stop any that do not within a bound."""
        for q, p in zip(self._tasks, self.processes):
            if p.is_alive():
                try:
                    q.put(None)
                except (OSError, ValueError):
                    pass
        end = time.monotonic() + _STOP_WAIT_S
        for p in self.processes:
            if p.pid is not None:
                p.join(max(0.05, end - time.monotonic()))
            _stop(p)
        for q in self._tasks + [self._results]:
            q.close()
            q.cancel_join_thread()
        if self.broken is None:
            self.broken = "closed"

    def __enter__(self) -> "RankGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def raise_on_failure(outcomes: list[RankOutcome], what: str = "ranks") -> list[Any]:
    """The ranks' return values, or a HarnessError naming every rank that failed."""
    bad = [o for o in outcomes if not o.ok]
    if bad:
        raise HarnessError(f"{what}: " + "; ".join(o.describe() for o in bad))
    return [o.value for o in outcomes]
