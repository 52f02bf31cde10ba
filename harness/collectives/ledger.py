"""The collective ledger: every collective a rank issues, with op, group, shapes and call site.

``install()`` wraps torch.distributed's collectives in this process. Each entry is appended to
a per-rank file and flushed *before* the collective is issued, so a rank that crashes or hangs
inside a collective still leaves a complete ledger behind for the controller to compare.

The call site is the chain of frames outside torch and outside the harness's own machinery
(:mod:`harness.frames`), i.e. in the stack under test and the user's code, innermost first.
Matching on op and shape alone blames the wrong collective when an extra one has the same
shape; the call site does not.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from harness.frames import hidden

_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                "broadcast", "barrier", "all_to_all_single", "reduce", "gather", "scatter", "send", "recv")
_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

__harness_hidden__ = True


def _short(path: str) -> str:
    if path.startswith(_HARNESS_DIR):
        return "harness/" + path[len(_HARNESS_DIR):]
    parts = path.split(os.sep)
    return "/".join(parts[-3:])


def call_sites(limit: int = 6) -> list[str]:
    """Frames outside torch and the harness's machinery, innermost first: ``path:line function``."""
    sites = []
    frame = sys._getframe(2)
    while frame is not None and len(sites) < limit:
        if not hidden(frame):
            sites.append(f"{_short(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return sites


def _describe(args, kwargs):
    shapes, dtypes = [], []

    def visit(x):
        if isinstance(x, torch.Tensor):
            shapes.append(list(x.shape))
            dtypes.append(str(x.dtype).replace("torch.", ""))
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)

    for a in args:
        visit(a)
    for k, v in kwargs.items():
        if k != "group":
            visit(v)
    return shapes, dtypes


class Ledger:
    def __init__(self):
        self.entries: list[dict] = []
        self.case: str | None = None
        self.in_flight: dict | None = None
        self._file = None
        self._lock = threading.Lock()
        self._seq = 0
        self.on_progress = None
        self.precheck = None     # a CollectivePrecheck, set by the rank's runner
        self.check_s = 0.0       # seconds spent recording and prechecking collectives (never reset)
        self._during: list[str] = []     # the stack's own calls under way (innermost last)

    @contextlib.contextmanager
    def during(self, what: str):
        """Every collective issued inside the block carries ``what`` (its ``during`` field): a stack
        names its own call a collective comes from (TE 1.x: which reduction, model and step), and
        a cross-rank mismatch then says it for each rank."""
        self._during.append(what)
        try:
            yield
        finally:
            self._during.pop()

    def progress(self) -> None:
        """Tell the rank's watchdog that the case moves (a step started, a collective returned)."""
        if self.on_progress is not None:
            self.on_progress()

    def open(self, path: str | None) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if path:
            self._file = open(path, "a", buffering=1)

    def begin_case(self, name: str) -> None:
        self.case, self.entries, self._seq = name, [], 0
        self._write({"begin": name})

    def end_case(self) -> list[dict]:
        self._write({"end": self.case})
        self.case = None
        return list(self.entries)

    def _write(self, obj) -> None:
        if self._file is not None:
            self._file.write(json.dumps(obj) + "\n")
            self._file.flush()

    def record(self, op: str, args, kwargs) -> dict:
        group = kwargs.get("group")
        try:
            ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
        except Exception:
            ranks = []
        shapes, dtypes = _describe(args, kwargs)
        reduce_op = kwargs.get("op")
        if reduce_op is None and op in ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce"):
            reduce_op = args[1] if len(args) > 1 and not isinstance(args[1], torch.Tensor) else "SUM"
        entry = {"seq": self._seq, "op": op, "group": ranks, "shapes": shapes, "dtypes": dtypes,
                 "reduce": str(reduce_op).split(".")[-1] if reduce_op is not None else None,
                 "sites": call_sites()}
        if self._during:
            entry["during"] = self._during[-1]
        return self._append(entry)

    def record_call(self, op: str, reduce: str | None = None) -> dict:
        """A call of the stack's own that reduces state like a collective, recorded even where no
        collective is issued (TE's amax reduction at world size 1 calls no ``all_reduce``).

        Recorded as an entry with no tensors and the caller's call sites, so the isolation oracle
        names a reduction point one run has and the other has not; it is not prechecked (the
        collective it may issue is, on its own)."""
        # No group: a process with a process group and one without (a rank of one and its isolated
        # run alongside, which joins none) record the same reduction point alike; a collective the
        # call issues is recorded on its own, with its group.
        entry = {"seq": self._seq, "op": op, "group": [], "shapes": [], "dtypes": [], "reduce": reduce,
                 "sites": call_sites()}
        return self._append(entry)

    def _append(self, entry: dict) -> dict:
        with self._lock:
            self._seq += 1
            self.entries.append(entry)
            self._write(entry)
        return entry


LEDGER = Ledger()
_INSTALLED = {"done": False}


def install() -> Ledger:
    """Wrap torch.distributed's collectives (idempotent)."""
    if _INSTALLED["done"]:
        return LEDGER
    for name in _COLLECTIVES:
        for module in (dist, dist.distributed_c10d):
            original = getattr(module, name, None)
            if original is None or getattr(original, "_ledger_wrapped", False):
                continue

            def make(original, name):
                @functools.wraps(original)
                def wrapper(*args, **kwargs):
                    t0 = time.perf_counter()
                    try:
                        entry = LEDGER.record(name, args, kwargs)
                        LEDGER.progress()
                        if LEDGER.precheck is not None:
                            LEDGER.precheck(entry)
                    finally:
                        LEDGER.check_s += time.perf_counter() - t0
                    LEDGER.in_flight = entry
                    try:
                        return original(*args, **kwargs)
                    finally:
                        LEDGER.in_flight = None
                        LEDGER.progress()
                wrapper._ledger_wrapped = True
                return wrapper

            setattr(module, name, make(original, name))
    _INSTALLED["done"] = True
    return LEDGER
