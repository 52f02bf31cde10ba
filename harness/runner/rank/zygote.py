"""A pristine process that forks a fresh child per isolated case run.

A fresh interpreter per case would pay ``import torch`` each time. Instead, right after imports
and before any case runs, the runner forks a *zygote*; for every isolated run the zygote forks a
child, which runs the case with empty stack registries (a forked child of a process that never
ran a case) and sends the result back as JSON. Children run torch single-threaded.

The zygote keeps children forked ahead of need, *spares*: each warms up what every case would start
with (the stack's optional ``warm_child(rank)``: for TE, the rank's GPU and its CUDA context) and
waits for its case. When a request comes the oldest spare takes it and the zygote forks a new one at
once, so warm-up overlaps the cases run meanwhile. A stack that warms keeps two spares: on TE's
catalogue a shared case can end sooner than one spare's fork and CUDA set-up
(docs/log/2026-12-02-te-isolation-cost.md). Without ``warm_child`` a spare is ready as soon as it is
forked, and one is enough. A spare has run no case: it is as fresh as a child forked on demand.

At world size 1 the isolated run of a case starts *alongside* the shared one (:meth:`Zygote.begin`
before the rank runs the case, :meth:`Zygote.end` when its result is asked for): with no process
group between the ranks' children, nothing of one run can reach the other, and the two overlap where
the machine has the cores. When the judge then wants no isolated run (the shared run's communication
failed, say), the rank cancels it (:meth:`Zygote.cancel`): the zygote kills the child rather than
wait for it. At larger world sizes the isolated children form a process group of their own, which a
shared run that breaks would leave waiting for a peer: there it starts after the shared run.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import struct
import time
import traceback

from harness.phases import mark
from harness.stacks.hooks import traits

__harness_hidden__ = True


def _send(fd: int, obj) -> None:
    data = json.dumps(obj).encode()
    os.write(fd, struct.pack("<I", len(data)))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _recv(fd: int, timeout: float | None = None):
    def read_exact(n):
        buf = b""
        while len(buf) < n:
            if timeout is not None:
                r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                if not r:
                    raise TimeoutError("no answer in time")
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise EOFError("pipe closed")
            buf += chunk
        return buf

    deadline = time.monotonic() + (timeout or 0)
    (n,) = struct.unpack("<I", read_exact(4))
    return json.loads(read_exact(n).decode())


def isolated_request(case, token: str, store: dict | None) -> dict:
    """What the zygote needs to run ``case`` alone: the case, a token that names its store keys
    and process group, and where the store is (``{"host", "port", "prefix"}``; None at world
    size 1). Everything else the child inherits from the rank it was forked from."""
    return {"case": case.to_dict(), "token": token, "store": store}


def isolated_timeout(deadline_s: float) -> float:
    """How long a rank waits for its zygote's answer: the case's waits, several times over."""
    return deadline_s * 4 + 30


def isolated_failure(case_name: str, rank: int, error: str | None) -> dict:
    """A rank result (as a dict) saying that the isolated run gave no result."""
    from harness.oracles.findings import ISOLATED_RUN_FAILED
    failure = {"oracle": "isolation", "rank": rank, "detail": f"isolated run failed: {error}", "kind": ISOLATED_RUN_FAILED}
    return {"case": case_name, "rank": rank, "failures": [failure]}


def _isolated_child(state, request: dict) -> dict:
    """In a fresh child of the zygote: the case alone, from empty registries."""
    import torch

    torch.set_num_threads(1)
    from harness.case.spec import CaseSpec
    from harness.runner.rank.execute import execute_case

    state.stack.reset()
    case = CaseSpec.from_dict(request["case"])
    if state.world > 1:
        import datetime

        import torch.distributed as dist

        where = request["store"]
        store = dist.TCPStore(where["host"], where["port"], is_master=False,
                              timeout=datetime.timedelta(seconds=max(30.0, state.settings.deadline_s)))
        if where.get("prefix"):
            store = dist.PrefixStore(where["prefix"], store)
        state.ledger.open(None)
        token = request["token"]
        state.join_group(store, prefix=f"{token}/pg/")
        state.begin_case(token)
    mark(f"rank {state.rank}: isolated case {case.name} started")
    try:
        result = execute_case(case, state, alone=True)
        mark(f"rank {state.rank}: isolated case {case.name} ran")
    finally:
        # The child leaves by os._exit, which skips atexit: release what the case created in
        # shared memory here (its Userbuffers communicators), or nothing would. A controller
        # sweeps its own prefix at teardown; a torchrun or mpirun launch has no controller.
        from harness.comm import destroy_ub

        state.stack.reset()
        destroy_ub()
    return records_as_text(result.to_dict())


_RECORDS_B64 = "data_base64"


def records_as_text(result: dict) -> dict:
    """A rank result whose records of its FP8 state (``states["data"]``, raw bytes) can cross the
    zygote's JSON pipes: the bytes as base64 text. :meth:`Zygote.end` turns them back."""
    states = result.get("states") or {}
    if isinstance(states.get("data"), (bytes, bytearray)):
        states = dict(states)
        states[_RECORDS_B64] = base64.b64encode(states.pop("data")).decode("ascii")
        result = dict(result, states=states)
    return result


def records_as_bytes(answer: dict) -> dict:
    """The inverse of :func:`records_as_text` on an answer ``{"ok": result}`` (others unchanged)."""
    states = (answer.get("ok") or {}).get("states") or {}
    if _RECORDS_B64 in states:
        states["data"] = base64.b64decode(states.pop(_RECORDS_B64))
    return answer


class _Cancelled(Exception):
    pass


CANCEL = {"cancel": True}    # rank -> zygote: end the isolated run in progress (ignored when none is)


class _Spare:
    """A child of the zygote that warmed up and waits for one isolated case (see the module)."""

    def __init__(self, pid: int, to_child: int, from_child: int):
        self.pid, self._to, self._from = pid, to_child, from_child

    @classmethod
    def fork(cls, state, not_mine: tuple) -> "_Spare":
        """``not_mine``: the zygote's pipe ends the spare inherits and must close, so that an end
        of pipe is seen when the process that owns the other end goes."""
        req_r, req_w = os.pipe()
        out_r, out_w = os.pipe()
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            for fd in (req_w, out_r) + tuple(not_mine):
                os.close(fd)
            _spare_main(state, zygote, req_r, out_w)     # never returns
        os.close(req_r)
        os.close(out_w)
        return cls(pid, req_w, out_r)

    def fds(self) -> tuple:
        return (self._to, self._from)

    def give(self, request: dict) -> None:
        _send(self._to, request)

    def answer(self, timeout: float, cancel_fd: int) -> dict:
        """The child's answer; a child that gives none within ``timeout`` is killed, and so is one
        whose run is cancelled meanwhile (a message on ``cancel_fd``)."""
        deadline = time.monotonic() + timeout
        try:
            ready, _, _ = select.select([self._from, cancel_fd], [], [], timeout)
            if not ready:
                raise TimeoutError("no answer in time")
            if self._from not in ready:
                _recv(cancel_fd)              # the cancel message itself
                raise _Cancelled()
            answer = _recv(self._from, timeout=max(0.0, deadline - time.monotonic()))
        except _Cancelled:
            os.kill(self.pid, signal.SIGKILL)
            answer = {"error": "cancelled: the judge wanted no isolated run"}
        except (TimeoutError, EOFError) as exc:
            os.kill(self.pid, signal.SIGKILL)
            answer = {"error": f"isolated run did not answer: {exc}"}
        self._reap()
        return answer

    def dismiss(self) -> None:
        """No case for this spare: closing its pipe ends it."""
        self._reap()

    def _reap(self) -> None:
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _spare_main(state, zygote_pid: int, req_r: int, out_w: int) -> None:
    """A spare's life: warm up, wait for the case (or for the zygote to close the pipe), run it,
    answer, exit. A warm-up that fails is reported as the isolated run's error."""
    from harness.runner.rank.watchdog import die_with_parent

    die_with_parent(zygote_pid)
    warm_error = None
    warm = traits(state.stack).warm_child
    if warm is not None:
        try:
            warm(state.rank)
            mark(f"rank {state.rank}: spare child warmed")
        except BaseException as exc:
            warm_error = f"warming up the isolated run failed: {type(exc).__name__}: {exc}"
    try:
        request = _recv(req_r)
    except EOFError:
        os._exit(0)
    try:
        if warm_error is not None:
            answer = {"error": warm_error}
        else:
            answer = {"ok": _isolated_child(state, request)}
    except BaseException as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"}
    try:
        _send(out_w, answer)
    finally:
        os._exit(0)


def spare_count(stack) -> int:
    """How many spares the zygote keeps (see the module): two for a stack that warms its
    children, one otherwise."""
    return 2 if traits(stack).warm_child is not None else 1


class Zygote:
    """Forked from a rank (``state``) right after its imports, before any case or process group."""

    def __init__(self, state):
        self.state = state
        self.pid: int | None = None
        self._to = self._from = None
        self._until: float | None = None      # the run in progress: when its answer is due

    def start(self) -> "Zygote":
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the zygote
            os.close(req_w)
            os.close(res_r)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            code = 0
            try:
                self._serve(self.state, req_r, res_w)
            except BaseException:
                code = 1
            os._exit(code)
        os.close(req_r)
        os.close(res_w)
        self.pid, self._to, self._from = pid, req_w, res_r
        return self

    @staticmethod
    def _serve(state, req_r: int, res_w: int) -> None:
        count = spare_count(state.stack)
        spares: list[_Spare] = []

        def refill(running=()) -> None:
            # Each new spare closes every pipe end it inherits but its own: the zygote's, the
            # running child's and the other spares'.
            while len(spares) < count:
                others = tuple(fd for s in spares for fd in s.fds())
                spares.append(_Spare.fork(state, (req_r, res_w) + tuple(running) + others))

        refill()
        try:
            while True:
                try:
                    request = _recv(req_r)
                except EOFError:
                    return
                if request == CANCEL:        # its run answered before the cancel came: nothing to end
                    continue
                child = spares.pop(0)        # the oldest: the one most likely warm
                child.give(request)
                refill(child.fds())          # warms up while ``child`` runs
                _send(res_w, child.answer(request.get("timeout_s", 60), cancel_fd=req_r))
        finally:
            for spare in spares:
                spare.dismiss()

    def run(self, request: dict, timeout: float) -> dict:
        """Run one isolated case; returns ``{"ok": rank_result_dict}`` or ``{"error": text}``."""
        self.begin(request, timeout)
        return self.end()

    @property
    def running(self) -> bool:
        """An isolated run was begun and its answer not yet taken."""
        return self._until is not None

    def begin(self, request: dict, timeout: float) -> None:
        """Start one isolated case (at most one at a time); :meth:`end` takes its answer."""
        if self.running:
            raise RuntimeError("an isolated run is already in progress")
        _send(self._to, dict(request, timeout_s=timeout))
        self._until = time.monotonic() + timeout + 5

    def end(self) -> dict:
        """The answer of the run :meth:`begin` started."""
        until, self._until = self._until, None
        if until is None:
            raise RuntimeError("no isolated run in progress")
        try:
            return records_as_bytes(_recv(self._from, timeout=max(0.0, until - time.monotonic())))
        except (TimeoutError, EOFError) as exc:
            return {"error": f"zygote did not answer: {exc}"}

    def cancel(self) -> None:
        """End the run in progress, if any, without its result: the zygote kills its child."""
        if self.running:
            try:
                _send(self._to, CANCEL)
            except OSError:
                pass
            self.end()

    def close(self) -> None:
        if self.pid is None:
            return
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.02)
        else:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.pid = None


class IsolatedRuns:
    """A rank's isolated runs through its zygote: one at a time, begun with the shared run of
    their case (world size 1, see the module) or when asked for.

    ``request(index, case)`` builds the zygote's request for the case at ``index``."""

    def __init__(self, zygote: Zygote, state, request):
        self.zygote, self.state, self.request = zygote, state, request
        self.index: int | None = None       # the case of the run in progress

    def begin(self, index: int, case) -> None:
        self.cancel()
        self.zygote.begin(self.request(index, case), timeout=isolated_timeout(self.state.settings.deadline_s))
        self.index = index

    def end(self, index: int, case) -> dict:
        """The answer of the isolated run of the case at ``index``, begun now if it was not."""
        if self.index != index:
            self.begin(index, case)
        self.index = None
        return self.zygote.end()

    def cancel(self) -> None:
        if self.index is not None:
            self.index = None
            self.zygote.cancel()
