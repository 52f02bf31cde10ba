"""What a hang report holds beside each rank's Python stack: the rank's flight recorder, the
stack under test's own progress record, Userbuffers timeouts from its log, and native stacks.

The flight recorder and the progress record live inside the rank, whose main thread is stuck,
so the controller asks and the rank's watchdog thread answers::

    controller (a case hung)                 rank r, watchdog thread, every round
    req = request(run_dir)            ->     serve(run_dir, rank, state)
                                              writes diagnostics-r{r}-{token}.json at once:
                                              flight recorder without frames, progress lines;
                                              then again with the collectives' Python frames
    texts = collect(run_dir, req, pids, log_paths)
            -> {rank: text}: flight recorder, progress, Userbuffers timeout lines, native stacks

The second answer can take seconds (torch symbolizes frames on first use, see
:func:`harness.hangs.flight_recorder.dump`); the controller waits for it a bounded time and
otherwise reports the first.

A stack adds its progress record with :func:`register_progress` (``--sut te`` lists the
Userbuffers exchanges it issued and whether the GPU finished each). A rank that does not
answer within ``wait_s`` (dead, or holding the GIL in C) gets a line saying so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import threading
import time

from harness.files import write_atomic
from harness.hangs import flight_recorder, native_stacks

REQUEST_FILE = "diagnostics-request"
PROVIDER_TIMEOUT_S = 2.0
_PROVIDERS: list = []

# TE's Userbuffers kernels print this when a wait passes UB_TIMEOUT (then carry on with stale data).
_UB_TIMEOUT_LINE = re.compile(r"(pushrecv|pullrecv|pushsendrecv|Reduce-scatter|reduce-scatter|Allgather|"
                              r"Allreduce|CE deadlock)[^\n]*(expecting|DETECTED)")


def register_progress(provider) -> None:
    """``provider()`` -> list of lines saying where this rank's asynchronous work stands."""
    if provider not in _PROVIDERS:
        _PROVIDERS.append(provider)


def unregister_progress(provider) -> None:
    if provider in _PROVIDERS:
        _PROVIDERS.remove(provider)


def progress_lines(timeout_s: float = PROVIDER_TIMEOUT_S) -> list[str]:
    """Every provider's lines; each runs on a helper thread, so one that blocks costs ``timeout_s``."""
    lines: list[str] = []
    for provider in list(_PROVIDERS):
        box: list = []

        def run(provider=provider):
            try:
                box.append(list(provider()))
            except Exception as exc:
                box.append([f"(progress record failed: {type(exc).__name__}: {exc})"])

        thread = threading.Thread(target=run, daemon=True, name="harness-progress")
        thread.start()
        thread.join(timeout_s)
        lines += box[0] if box else [f"(progress record gave no answer within {timeout_s:g} s)"]
    return lines


def _path(run_dir: str, rank: int, token: str) -> str:
    return os.path.join(run_dir, f"diagnostics-r{rank}-{token}.json")


@dataclasses.dataclass(frozen=True)
class Request:
    token: str
    at: float          # time.monotonic() when it was made: collect()'s waits count from here


def request(run_dir: str) -> Request:
    """Ask every rank of the group for its diagnostics (answered by :func:`serve`)."""
    token = secrets.token_hex(4)
    write_atomic(os.path.join(run_dir, REQUEST_FILE), token)
    return Request(token, time.monotonic())


class ServeState:
    """One rank's memory of the last request it answered."""

    def __init__(self):
        self.answered: str | None = None


def serve(run_dir: str, rank: int, state: ServeState) -> bool:
    """Answer a pending request (one file read when there is none). True when it wrote one."""
    try:
        with open(os.path.join(run_dir, REQUEST_FILE)) as fh:
            token = fh.read().strip()
    except OSError:
        return False
    if not token or token == state.answered:
        return False
    state.answered = token
    body = {"rank": rank, "pid": os.getpid(), "progress": progress_lines()}
    for frames in (False, True):
        try:
            body["flight_recorder"] = flight_recorder.dump(frames=frames)
        except Exception as exc:
            body["flight_recorder"] = {"harness": {"error": f"{type(exc).__name__}: {exc}"}}
        body["frames"] = frames
        path = _path(run_dir, rank, token)
        try:
            write_atomic(path, json.dumps(body))
        except OSError:        # the run folder is going away: the controller stopped waiting
            return False
    return True


def ub_timeout_lines(text: str, limit: int = 8) -> list[str]:
    """Lines TE's Userbuffers kernels print when a wait times out (``UB_TIMEOUT``)."""
    found = [line.strip() for line in text.splitlines() if _UB_TIMEOUT_LINE.search(line)]
    return found[:limit] + ([f"... and {len(found) - limit} more"] if len(found) > limit else [])


def _read(path: str, max_bytes: int = 1 << 20) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - max_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def collect(run_dir: str, req: Request, pids: dict[int, int], log_paths=(), wait_s: float = 2.0,
            frames_wait_s: float = 2.0, native_timeout_s: float = 15.0) -> dict[int, str]:
    """rank -> the diagnostics text for a hang report (every rank of ``pids``).

    Waits until ``wait_s`` after the request for every rank's first answer and until
    ``frames_wait_s`` after it for the answers with frames, all ranks together (a hang report
    is late by at most that); native stacks of the live ranks are taken meanwhile, bounded by
    ``native_timeout_s``.
    """
    token = req.token
    live = {r: p for r, p in pids.items() if _alive(p)}
    natives: dict = {}
    native_thread = threading.Thread(target=lambda: natives.update(native_stacks.take(live, native_timeout_s)),
                                     daemon=True, name="harness-native-stacks")
    native_thread.start()
    answers: dict[int, dict] = {}
    start = req.at
    while True:
        for rank in pids:
            if not answers.get(rank, {}).get("frames") and os.path.exists(_path(run_dir, rank, token)):
                try:
                    with open(_path(run_dir, rank, token)) as fh:
                        answers[rank] = json.load(fh)
                except (OSError, json.JSONDecodeError):
                    pass
        waited = time.monotonic() - start
        silent = [r for r in live if r not in answers]
        if all(answers.get(r, {}).get("frames") for r in live) or waited > frames_wait_s \
                or (silent and waited > wait_s):
            break
        time.sleep(0.05)       # a poll interval: the ranks' watchdogs answer on their own rounds
    native_thread.join(native_timeout_s + 5.0)
    logs = list(log_paths)
    texts = {}
    for rank in sorted(pids):
        parts = []
        body = answers.get(rank)
        if body is None:
            why = "process gone" if rank not in live else f"no answer within {wait_s:g} s"
            parts.append(f"flight recorder and progress: none ({why})")
        else:
            parts.append(flight_recorder.format_dump(body.get("flight_recorder") or {}))
            if not body.get("frames"):
                parts.append(f"  (without the collectives' Python frames: not symbolized within {frames_wait_s:g} s)")
            if body.get("progress"):
                parts.append("progress record:\n" + "\n".join("  " + line for line in body["progress"]))
        log = logs[rank] if len(logs) == len(pids) and rank < len(logs) else None
        timeouts = ub_timeout_lines(_read(log)) if log else []
        if timeouts:
            parts.append("Userbuffers timeouts in the rank's output:\n" + "\n".join("  " + t for t in timeouts))
        parts.append(natives.get(rank, "native stacks: none (process gone)" if rank not in live
                                 else "native stacks: none (the tool gave no answer)"))
        texts[rank] = "\n".join(parts)
    return texts


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
