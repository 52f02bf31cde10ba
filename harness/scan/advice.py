"""What to tell the owner of a hazardous registry: why it goes wrong, and the fix.

:func:`~harness.scan.registry.group` calls :func:`why` and :func:`fix` once per hazard
finding, with the judged uses of one registry. The fix is chosen from what the registry is:

* a dict keyed by ``id(obj)`` (or ``hash(obj)``): key it by the object in a
  ``weakref.WeakKeyDictionary``; else prune with ``weakref.finalize``; else keep the object
  alive in the value;
* a set or list of ids: a ``weakref.WeakSet``, or clear it when the phase that fills it ends;
* a key built from several ids: prune with ``weakref.finalize`` on each object, or keep the
  objects in the value;
* a saved id: a ``weakref.ref`` compared with ``is``;
* an ``lru_cache`` called with an id: pass the object (or a weak reference), or clear the
  cache when the objects are released;
* a registry that only lives for one call or one phase: reset it on teardown.
"""

from __future__ import annotations

from harness.scan.codes import Code
from harness.scan.verdict import Lifetime

_CONSEQUENCE = {
    "read": "when one of them dies and a new object gets its address, the lookup at {where} finds the dead object's entry",
    "store": "when one of them dies its entry stays, and a new object that gets its address matches it at {where}",
    "saved": "when the object dies and a new one gets its address, it compares equal to the id saved at {where}",
    "cached": "the cache called at {where} keeps results for dead objects and hands them to new objects at the same address",
}

WEAK_KEYS = (
    "key the registry by the object itself in a weakref.WeakKeyDictionary, so the entry dies with it"
)
FINALIZE = "prune the entry when the object dies: weakref.finalize(obj, registry.pop, key, None)"
KEEP_ALIVE = "or keep the object alive in the value (registry[key] = (obj, value)), so its address cannot be reused while the entry exists"
RESET = "reset the registry on teardown (clear it where the phase that fills it ends: a finally, __exit__, or the end of the build)"


def why(lifetime_reason: str, keys: list[str], uses: list) -> str:
    """The hazard, each part said once: how long the registry lives (``lifetime_reason``),
    what it is keyed by (``keys``: the key expressions of its stores), and the use that goes
    wrong (the first lookup, else the first store; ``uses`` are its per-line findings)."""
    by_role = {role: [u for u in uses if u.role == role] for role in ("read", "saved", "cached", "store")}
    role = next((r for r in ("read", "saved", "cached", "store") if by_role[r]), "store")
    use = by_role[role][0] if by_role[role] else None
    where = f"{use.path}:{use.line} ({use.subject})" if use is not None else "the next use"
    keyed = f"it is keyed by {', '.join(keys[:2])}" if keys else "it holds ids"
    return f"{lifetime_reason}; {keyed}; " + _CONSEQUENCE[role].format(where=where)


def fix(codes: set[Code], roles: set[str], lifetime: Lifetime) -> str:
    """The advice for one hazardous registry (see the module docstring)."""
    short_lived = lifetime in (Lifetime.LOCAL, Lifetime.CLOSURE, Lifetime.RETURNED, Lifetime.PARAM)
    if roles == {"cached"}:
        return (
            "pass the object (or a weakref.ref to it) to the cached function instead of its id, "
            "or call cache_clear() when the objects are released"
        )
    if roles == {"saved"}:
        return "keep a weakref.ref(obj) and test ref() is obj instead of comparing a saved id"
    if Code.KEY_BUILT_FROM_ID in codes:
        advice = f"{FINALIZE} on each object in the key; {KEEP_ALIVE}; or key by values that describe the objects instead of their addresses"
    elif Code.COLLECTION_OF_IDS in codes and Code.DICT_KEYED_BY_ID not in codes:
        advice = (
            "hold the objects in a weakref.WeakSet instead of their ids, or prune each id with "
            "weakref.finalize(obj, ids.discard, id(obj))"
        )
    else:
        advice = f"{WEAK_KEYS}; where the object cannot be weakly referenced, {FINALIZE}; {KEEP_ALIVE}"
    if short_lived:
        return f"{RESET}; or {advice}"
    return f"{advice}; or {RESET}"
