"""Registries compared across ranks: a digest of their keys' shapes and their entries' sizes.

Ranks that run the same case in lock step hold registries of the same shape at every collective:
the same keys (ids aside: they are addresses, different in every process) with entries of the
same sizes. A registry pruned on one rank only, or grown on one rank only (a dead weight's id
taken on one rank and not the other), differs there. The collective precheck publishes
:func:`registry_summary` with every collective and compares it with each peer's before the
collective is issued (:func:`registry_divergence`), so such a divergence is reported at the first
collective after it happened, naming the registry, instead of at a later size mismatch.

What a key's shape is: ints that can be addresses become ``id``, other scalars keep their value,
tuples their element shapes, tensors their dtype and shape, anything else its type name. A string
keeps its text with every address written in it blanked to ``id``: a decimal address, the default
``hash()`` of an object (its address rotated by 4 bits: TE 1.x keys its autocast buffers on
``f"{recipe}:{hash(group)}"``), and a ``0x`` address as in an object's repr. An entry's size: a
container's length, a tensor's element count, else 1.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from harness.idreuse.containers import plausible_address

_SCALARS = (str, float, bool, type(None), bytes)
_NUMBERS_IN_TEXT = re.compile(r"0x[0-9a-fA-F]{6,16}|-?\d{9,20}")
_MASK = (1 << 64) - 1
_TEXT_ADDRESS_FLOOR = 1 << 32      # a heap or mapping address written as text; smaller numbers are counts


def _address_text(number: str) -> bool:
    """Whether a number written in a string is an address, or an object's default hash of one."""
    if number.lower().startswith("0x"):
        return plausible_address(int(number, 16))
    value = int(number) & _MASK
    unrotated = ((value << 4) | (value >> 60)) & _MASK        # CPython's pointer hash, undone
    return any(plausible_address(v) and v >= _TEXT_ADDRESS_FLOOR for v in (value, unrotated))


def text_shape(text: str) -> str:
    """``text`` with the addresses written in it blanked to ``id``."""
    return _NUMBERS_IN_TEXT.sub(lambda m: "id" if _address_text(m.group(0)) else m.group(0), text)


def key_shape(key: Any) -> str:
    """What a key looks like with its ids blanked out (identical on every rank of a lock-step run)."""
    if type(key) is int:
        return "id" if plausible_address(key) else repr(key)
    if isinstance(key, str):
        return repr(text_shape(key))
    if isinstance(key, _SCALARS):
        return repr(key)
    if isinstance(key, tuple):
        return "(" + ",".join(key_shape(k) for k in key) + ")"
    if isinstance(key, frozenset):
        return "{" + ",".join(sorted(key_shape(k) for k in key)) + "}"
    if hasattr(key, "shape") and hasattr(key, "dtype"):
        return f"T{key.dtype}{list(key.shape)}"
    return type(key).__qualname__


def entry_size(value: Any) -> int:
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return len(value)
    numel = getattr(value, "numel", None)
    if callable(numel) and hasattr(value, "dtype"):
        return int(numel())
    return 1


_SHAPE_CACHE: dict = {}
_SHAPE_CACHE_LIMIT = 4096


def _cached_shape(key: Any) -> str:
    """:func:`key_shape`, remembered for tuple keys: the precheck takes every registry's summary
    before every collective, and the same few nested keys (recipe, group) were most of its cost."""
    if type(key) is not tuple:
        return key_shape(key)
    try:
        return _SHAPE_CACHE[key]
    except KeyError:
        shape = _SHAPE_CACHE[key] = key_shape(key)
        if len(_SHAPE_CACHE) > _SHAPE_CACHE_LIMIT:
            _SHAPE_CACHE.clear()
        return shape
    except TypeError:                  # a tuple holding something unhashable
        return key_shape(key)


def _items(registry: Any) -> list[tuple[str, int]]:
    if isinstance(registry, dict):
        return [(_cached_shape(k), entry_size(v)) for k, v in list(registry.items())]
    if isinstance(registry, (list, tuple, set, frozenset)):
        return [(_cached_shape(v), entry_size(v)) for v in list(registry)]
    if hasattr(registry, "__dict__"):
        return [(name, entry_size(v)) for name, v in list(vars(registry).items())]
    return [(key_shape(registry), 1)]


def registry_summary(registries: Mapping[str, Any]) -> dict[str, list]:
    """Per registry: ``[keys, entries, digest]``: its own length, the summed sizes of its entries,
    and 12 hex digits over the sorted (key shape, entry size) pairs."""
    out = {}
    for name, registry in registries.items():
        items = sorted(_items(registry))
        digest = hashlib.sha1(repr(items).encode()).hexdigest()[:12]
        out[name] = [len(items), sum(size for _, size in items), digest]
    return out


def registry_digest(registries: Mapping[str, Any]) -> str:
    """One digest of every registry's summary (12 hex digits)."""
    summary = registry_summary(registries)
    return hashlib.sha1(repr(sorted(summary.items())).encode()).hexdigest()[:12]


def registry_divergence(mine: Mapping[str, list] | None, theirs: Mapping[str, list] | None,
                        rank: int, peer: int) -> list[str]:
    """One line per registry whose summary differs between ``rank`` and ``peer`` (empty when
    they agree, or when either side published none)."""
    if mine is None or theirs is None:
        return []
    lines = []
    for name in sorted(set(mine) | set(theirs)):
        a, b = mine.get(name), theirs.get(name)
        if a == b:
            continue

        def side(r, s):
            return f"rank {r}: absent" if s is None else f"rank {r}: {s[0]} keys, {s[1]} entries (shape digest {s[2]})"

        lines.append(f"{name}: {side(rank, a)}; {side(peer, b)}")
    return lines
