"""A collective as the ledger records it, and the two ways entries are compared and shown.

An entry is a plain dict (it crosses process boundaries as JSON)::

    {"seq": 12, "op": "all_reduce", "group": [0, 1], "reduce": "MAX",
     "shapes": [[2]], "dtypes": ["float32"], "sites": ["path.py:43 fn", ...]}

``sites`` are the frames outside torch and the harness's own machinery, innermost first (see
:mod:`harness.frames`).
"""

from __future__ import annotations

import json

__harness_hidden__ = True


def signature(entry: dict, with_sizes: bool = True) -> tuple:
    """What must match across ranks (with sizes) or across runs of one case (without)."""
    base = (entry["op"], tuple(entry["group"]), entry.get("reduce"), tuple(entry["sites"]))
    if with_sizes:
        return base + (json.dumps(entry["shapes"]), tuple(entry["dtypes"]))
    return base


def shape_signature(entry: dict) -> dict:
    """What the precheck compares: everything but the call site."""
    return {"op": entry["op"], "group": entry["group"], "reduce": entry.get("reduce"),
            "shapes": entry["shapes"], "dtypes": entry["dtypes"]}


def describe(sig: dict, sites=None) -> str:
    """``all_reduce MAX float32[2] at a.py:1 f <- b.py:2 g`` for a shape signature (or entry)."""
    shapes = ",".join("x".join(map(str, s)) or "scalar" for s in sig["shapes"])
    red = f" {sig['reduce']}" if sig.get("reduce") else ""
    where = f" at {' <- '.join(sites)}" if sites else ""
    return f"{sig['op']}{red} {'/'.join(sig['dtypes'][:1])}[{shapes}]{where}"


def format_entry(entry: dict | None) -> str:
    """One entry as a report line: sequence number, op, dtype and shapes, and up to four call sites."""
    if entry is None:
        return "(no collective)"
    site = " <- ".join(entry["sites"][:4]) or "(no site outside torch and the harness)"
    return f"#{entry['seq']} {describe(entry)} at {site}{during(entry)}"


def during(entry: dict) -> str:
    """`` (during ...)`` naming the stack's own call an entry was issued in, or nothing."""
    return f" (during {entry['during']})" if entry.get("during") else ""
