"""Retention: registries that grow with every case and keep a dead model's state alive.

Reported (a warning) by default and a failure under ``--strict``. TE's global amax buffers,
post-fix and on main, never prune: both emulated stacks keep that on purpose and declare it
(``retained_on_purpose``, an optional part of the stack protocol), so their growth is a note,
under ``--strict`` too, and only growth elsewhere fails (:func:`split_growth`).
"""

from __future__ import annotations

import torch

from harness.idreuse.tracker import TrackedObject


def registry_sizes(registries: dict, known: dict | None = None) -> dict[str, dict]:
    """Per registry: entries and the bytes of the tensors it reaches.

    Entries are the registry's own items plus the items of the lists, sets and dicts directly
    under them (a dict of buffers counts every meta in every buffer); tuples count as one item.
    ``known``: sizes taken earlier with nothing of the stack run since; a registry whose entry
    count is unchanged there keeps its bytes instead of being walked again.
    """
    sizes = {}
    for name, reg in registries.items():
        items = list(reg.values()) if isinstance(reg, dict) else list(reg) if isinstance(reg, (list, set, frozenset)) else []
        entries = len(items)
        for v in items:
            if isinstance(v, (list, set, frozenset, dict)):
                entries += len(v)
        earlier = (known or {}).get(name)
        if earlier is not None and earlier["entries"] == entries:
            sizes[name] = dict(earlier)
        else:
            sizes[name] = {"entries": entries, "bytes": _tensor_bytes(reg)}
    return sizes


# Exact types that are neither tensors nor containers and have no __dict__: walking into them
# counts nothing, so they are never pushed (most of a meta's attributes are such values).
_LEAF_TYPES = frozenset({str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device})
_MAX_DEPTH = 6


def _tensor_bytes(root) -> int:
    nbytes, seen, stack = 0, set(), [(root, 0)]
    leaf = _LEAF_TYPES
    while stack:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            nbytes += obj.nbytes          # numel() * element_size()
            continue
        if isinstance(obj, dict):
            children = obj.values()
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children = obj
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            children = vars(obj).values()
        else:
            continue
        if depth >= _MAX_DEPTH:     # deeper children would be skipped when popped
            continue
        for v in children:
            if type(v) in leaf:
                continue
            if isinstance(v, torch.Tensor):
                # A tensor has no children: counting it here is what popping it would do.
                if id(v) not in seen:
                    seen.add(id(v))
                    nbytes += v.nbytes
                continue
            stack.append((v, depth + 1))
    return nbytes


def retained_state(objects: list[TrackedObject], parked_ids: set[int]) -> tuple[int, int]:
    """(count, bytes) of a dead model's state tensors still alive after it was collected."""
    count = nbytes = 0
    for o in objects:
        if o.kind != "state" or o.ident in parked_ids:
            continue
        t = o.ref()
        if t is not None:
            count += 1
            nbytes += t.numel() * t.element_size()
    return count, nbytes


def growth(before: dict[str, dict], after: dict[str, dict]) -> dict[str, dict]:
    out = {}
    for name, a in after.items():
        b = before.get(name, {"entries": 0, "bytes": 0})
        de, db = a["entries"] - b["entries"], a["bytes"] - b["bytes"]
        if de or db:
            out[name] = {"entries": de, "bytes": db}
    return out


RETENTION_NOTE = "retention: "      # how a retention warning or note begins among a case's warnings


def split_growth(grew: dict[str, dict], on_purpose) -> tuple[dict, dict]:
    """``(kept on purpose, other)``: the registries that grew, split by the stack's declaration."""
    kept = {k: v for k, v in grew.items() if k in on_purpose}
    return kept, {k: v for k, v in grew.items() if k not in on_purpose}


def describe_growth(grew: dict[str, dict]) -> str:
    return ", ".join(f"{k} +{v['entries']} entries (+{v['bytes']} B)" for k, v in grew.items())


def is_retention_warning(line: str) -> bool:
    return line.startswith(RETENTION_NOTE)
