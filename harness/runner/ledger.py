"""The collective ledger: every collective a rank issues, with op, group, shapes and call site.

``install()`` wraps torch.distributed's collectives in this process. Each entry is appended to
a per-rank file and flushed *before* the collective is issued, so a rank that crashes or hangs
inside a collective still leaves a complete ledger behind for the controller to compare.

The call site is the chain of frames outside torch and outside the harness's own runner, i.e.
in the stack under test and the user's code, innermost first. Matching on op and shape alone
blames the wrong collective when an extra one has the same shape; the call site does not.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import sysconfig
import threading
import time

import torch
import torch.distributed as dist

_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                "broadcast", "barrier", "all_to_all_single", "reduce", "gather", "scatter", "send", "recv")
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_SKIP_DIRS = (_TORCH_DIR, os.path.join(_HARNESS_DIR, "runner") + os.sep, os.path.join(_HARNESS_DIR, "idreuse") + os.sep,
              os.path.join(_HARNESS_DIR, "faults") + os.sep, _STDLIB_DIR)


def _short(path: str) -> str:
    if path.startswith(_HARNESS_DIR):
        return "harness/" + path[len(_HARNESS_DIR):]
    parts = path.split(os.sep)
    return "/".join(parts[-3:])


@functools.lru_cache(maxsize=None)
def _site_file(fn: str) -> str | None:
    """The short name of a frame's file when its frames count as call sites, else None.

    Cached per file name: resolving symlinks (``realpath``) costs a system call per path
    component, and every collective walks the same few files.
    """
    if os.path.realpath(fn).startswith(_SKIP_DIRS) or fn.startswith(_SKIP_DIRS) or "<frozen" in fn \
            or "/_pytest/" in fn or "/pluggy/" in fn:
        return None
    return _short(fn)


def call_sites(limit: int = 6) -> list[str]:
    """Frames outside torch and the runner, innermost first: ``path:line function``."""
    sites = []
    frame = sys._getframe(2)
    while frame is not None and len(sites) < limit:
        short = _site_file(frame.f_code.co_filename)
        if short is not None:
            sites.append(f"{short}:{frame.f_lineno} {frame.f_code.co_name}")
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
        self.precheck = None     # a CollectivePrecheck, set by the worker
        self.check_s = 0.0       # seconds spent recording and prechecking collectives (never reset)

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


def signature(entry: dict, with_sizes: bool = True) -> tuple:
    """What must match across ranks (with sizes) or across runs of one case (without)."""
    base = (entry["op"], tuple(entry["group"]), entry.get("reduce"), tuple(entry["sites"]))
    if with_sizes:
        return base + (json.dumps(entry["shapes"]), tuple(entry["dtypes"]))
    return base


def format_entry(entry: dict | None) -> str:
    if entry is None:
        return "(no collective)"
    shapes = ",".join("x".join(str(d) for d in s) or "scalar" for s in entry["shapes"])
    red = f" {entry['reduce']}" if entry.get("reduce") else ""
    site = " <- ".join(entry["sites"][:4]) or "(no site outside torch and the harness)"
    return f"#{entry['seq']} {entry['op']}{red} {'/'.join(entry['dtypes'][:1])}[{shapes}] at {site}"
