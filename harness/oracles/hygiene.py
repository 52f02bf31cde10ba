"""Registry hygiene: after a model died, no registry holds a dead object's id, no model object lives.

Registries are walked through dict keys and values, sets, lists and tuples; every int found is
compared with the ids of the model's dead (or parked) objects.
"""

from __future__ import annotations

import gc

from harness.idreuse.tracker import TrackedObject


def _r(value, limit: int = 32) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_INT_HOLDERS = (int, dict, set, frozenset, list, tuple)   # an int, or what _walk_ints walks into


def _walk_ints(obj, path: str, out: list, depth: int = 0, seen=None) -> None:
    if seen is None:
        seen = set()
    if depth > 6 or id(obj) in seen:
        return
    if isinstance(obj, bool):
        return
    if isinstance(obj, int):
        out.append((path, obj))
        return
    # Children that can hold no int (a registry's tensors, metas, modules) are skipped before their
    # path text is formatted: formatting it for every element dominated this scan on big registries.
    if isinstance(obj, dict):
        seen.add(id(obj))
        for k, v in list(obj.items()):
            if isinstance(k, _INT_HOLDERS):
                _walk_ints(k, f"{path} key {_r(k)}", out, depth + 1, seen)
            if isinstance(v, _INT_HOLDERS):
                _walk_ints(v, f"{path}[{_r(k)}]", out, depth + 1, seen)
    elif isinstance(obj, (set, frozenset, list, tuple)):
        seen.add(id(obj))
        for i, v in enumerate(list(obj)):
            if isinstance(v, _INT_HOLDERS):
                _walk_ints(v, f"{path} element" if isinstance(v, int) else f"{path}[{i}]", out, depth + 1, seen)


def stale_ids(registries: dict, dead: dict[int, str]) -> list[str]:
    """One line per registry entry that holds the id of a dead object."""
    findings = []
    for name, registry in registries.items():
        found: list = []
        _walk_ints(registry, name, found)
        for path, value in found:
            if value in dead:
                findings.append(f"{path} holds id {value:#x} of dead {dead[value]}")
    return findings


def survivors(objects: list[TrackedObject], parked_ids: set[int]) -> list[str]:
    """Model objects still alive after the model was deleted and collected, with a referrer."""
    lines = []
    for o in objects:
        if o.kind != "model" or o.ident in parked_ids:
            continue
        obj = o.ref()
        if obj is None:
            continue
        holders = [type(r).__name__ for r in gc.get_referrers(obj) if not isinstance(r, type(lines))][:3]
        lines.append(f"{o.desc} is still alive (referenced by {', '.join(holders) or 'something'})")
        del obj
    return lines
