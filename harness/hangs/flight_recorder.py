"""PyTorch's flight recorder: the last collectives each rank issued, read from inside the rank.

torch.distributed keeps a ring buffer of recent collectives per process when its size is set
before the first process group is made (``TORCH_FR_BUFFER_SIZE``, older releases
``TORCH_NCCL_TRACE_BUFFER_SIZE``): one recorder for NCCL groups (CUDA builds) and one for
gloo groups (torch 2.13 records gloo collectives too, with their Python frames; measured on
the CPU build here). Each entry has the group, the collective's sequence number in it, the
op, the sizes, its state (``scheduled``, ``started`` with ``TORCH_NCCL_ENABLE_TIMING=1``,
``completed``) and the Python frames that issued it.

Who calls what:

* the controller puts :func:`environment` into the ranks' environment when it starts them;
* a rank calls :func:`dump` (from its watchdog thread, which runs while the main thread is
  stuck in C) and writes the plain-data result where the controller reads it;
* the controller formats it with :func:`format_dump`, beside the rank's Python stack.

Everything but :func:`dump` is plain Python on plain data.
"""

from __future__ import annotations

import os
import pickle

BUFFER_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DEFAULT_ENTRIES = 2000
KEEP = 64                      # entries per recorder a dump keeps (the newest)

# (label, name of the torch._C._distributed_c10d function that returns a pickled dump)
_SOURCES = (("nccl", "_dump_nccl_trace"), ("gloo", "_dump_fr_trace"))


def environment(entries: int = DEFAULT_ENTRIES, env=None) -> dict:
    """Variables that turn the recorder on in a rank, unless ``env`` already chose a size.

    ``TORCH_NCCL_ENABLE_TIMING`` makes NCCL record when a collective's kernel started, which
    tells a collective queued behind other GPU work from one waiting for its peers.
    """
    env = os.environ if env is None else env
    if any(name in env for name in BUFFER_ENV):
        return {}
    out = {name: str(entries) for name in BUFFER_ENV}
    out.setdefault("TORCH_NCCL_ENABLE_TIMING", env.get("TORCH_NCCL_ENABLE_TIMING", "1"))
    return out


def _plain(value):
    """Pickled dumps hold tuples and numbers; JSON wants lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def dump(keep: int = KEEP, frames: bool = True) -> dict:
    """This process's recorders as plain data: ``{label: {"entries": [...], "pg_config": ...}}``.

    A recorder this torch does not have is left out; one that fails to dump says why under
    ``"error"``. Only the newest ``keep`` entries of each are kept. ``frames``: with each entry's
    Python frames. torch symbolizes them on first use in a process, which took 4.2 to 8.3 s on
    the 2-core development machine (torch 2.13; measured with one gloo collective recorded);
    later dumps take milliseconds. Without frames a dump is immediate.
    """
    import torch

    c10d = torch._C._distributed_c10d
    out: dict = {}
    for label, name in _SOURCES:
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        try:
            raw = pickle.loads(fn(includeCollectives=True, includeStackTraces=frames, onlyActive=False))
        except Exception as exc:       # a recorder that cannot dump is a fact for the report, not a crash
            out[label] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        entries = raw.get("entries", [])
        out[label] = {"entries": _plain(entries[-keep:]), "total": len(entries),
                      "pg_config": _plain(raw.get("pg_config", {})), "pg_status": _plain(raw.get("pg_status", {}))}
    return out


def _frames(entry: dict, limit: int) -> str:
    """The entry's frames outside torch, innermost first (the stack under test, or the harness)."""
    torch_dir = os.sep + "torch" + os.sep
    kept = [f for f in entry.get("frames") or [] if torch_dir not in str(f.get("filename", ""))]
    parts = []
    for f in kept[:limit]:
        path = str(f.get("filename", "?")).split(os.sep)
        parts.append(f"{'/'.join(path[-3:])}:{f.get('line', '?')} {f.get('name', '?')}")
    return " <- ".join(parts)


def _sizes(sizes) -> str:
    return ",".join("x".join(str(d) for d in s) or "scalar" for s in sizes or [])


def _group(entry: dict, pg_config: dict) -> str:
    pg = entry.get("process_group") or []
    name = str(pg[0]) if pg else "?"
    desc = str(pg[1]) if len(pg) > 1 else ""
    ranks = (pg_config.get(name) or {}).get("ranks")
    label = desc if desc and desc != "undefined" else f"group {name}"
    return f"{label} ranks {ranks}" if ranks else label


def finished(entry: dict) -> bool:
    """Done: NCCL marks it ``completed``; gloo leaves ``scheduled`` and retires the entry."""
    return entry.get("state") == "completed" or bool(entry.get("retired"))


def _why_empty(env=None) -> str:
    """An empty recorder: off, or on in a process that made no collective (world size 1)."""
    env = os.environ if env is None else env
    name = next((name for name in BUFFER_ENV if name in env), "")
    size = env.get(name, "").strip()
    if size.isdigit() and int(size) > 0:
        return f"(it is on, {name}={size}: this process made none)"
    return f"(off unless {BUFFER_ENV[0]} > 0 when the process group was made)"


def format_entry(entry: dict, pg_config: dict | None = None, frames: int = 3) -> str:
    """One collective: ``#seq op dtype[sizes] in group: state (at frames)``."""
    seq = entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")
    dtype = (entry.get("input_dtypes") or ["?"])[0]
    state = "completed" if finished(entry) else str(entry.get("state", "?"))
    where = _frames(entry, frames)
    return (f"#{seq} {entry.get('profiling_name', '?')} {dtype}[{_sizes(entry.get('input_sizes'))}] "
            f"in {_group(entry, pg_config or {})}: {state}" + (f" at {where}" if where else ""))


def format_dump(dumped: dict, last: int = 8) -> str:
    """What :func:`dump` returned, as text: the newest ``last`` entries of each recorder."""
    if not dumped:
        return "flight recorder: not available in this torch"
    lines = []
    for label in sorted(dumped):
        rec = dumped[label]
        if "error" in rec:
            lines.append(f"{label} flight recorder: could not dump: {rec['error']}")
            continue
        entries = rec.get("entries") or []
        if not entries:
            lines.append(f"{label} flight recorder: no collective recorded " + _why_empty())
            continue
        shown = entries[-last:]
        lines.append(f"{label} flight recorder: last {len(shown)} of {rec.get('total', len(entries))} collectives, "
                     f"oldest first:")
        lines += ["  " + format_entry(e, rec.get("pg_config")) for e in shown]
        pending = [e for e in entries if not finished(e)]
        if pending:
            lines.append(f"  not completed: {len(pending)} (the oldest: {format_entry(pending[0], rec.get('pg_config'))})")
    return "\n".join(lines)
