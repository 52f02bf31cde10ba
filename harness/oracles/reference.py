"""Reference equality: every role's meta and bytes equal the reference, bit for bit."""

from __future__ import annotations

import torch

from harness.fp8.bits import bit_view, first_bit_mismatch
from harness.fp8.state import RoleState

STEP_FIELDS = ("amax_history", "scale", "scale_inv", "fp8_bytes", "fp8_scale_inv")
# After the last optimizer step only what the weight *is* is compared: the meta's scale between
# an optimizer step and the next forward legitimately depends on when the weight amax is reduced.
FINAL_FIELDS = ("fp8_bytes", "fp8_scale_inv")


def compare_states(expected: dict[str, RoleState], actual: dict[str, RoleState], fields=STEP_FIELDS) -> str | None:
    """None when equal; else a one-line description of the first differing element."""
    for key in sorted(expected):
        if key not in actual:
            return f"{key}: missing from the stack's snapshot (it has {', '.join(sorted(actual)) or 'nothing'})"
        exp, act = expected[key], actual[key]
        for field in fields:
            e, a = getattr(exp, field), getattr(act, field)
            if e is None and a is None:
                continue
            if e is None or a is None:
                return f"{key}.{field}: expected {'nothing' if e is None else 'a tensor'}, got {'nothing' if a is None else 'a tensor'}"
            if a.shape != e.shape and a.numel() == e.numel():
                a = a.reshape(e.shape)          # (a reshape to its own shape would be a no-op view)
            if _same_bits(e, a):
                continue
            mismatch = first_bit_mismatch(e, a, f"{key}.{field}")
            if mismatch is not None:
                return str(mismatch)
    return None


def _same_bits(e, a) -> bool:
    """Fast path: identical bit patterns (one comparison, no index search); False means "look closer"."""
    if e.dtype != a.dtype or e.shape != a.shape:
        return False
    try:
        return torch.equal(bit_view(e), bit_view(a))
    except KeyError:      # a dtype without an integer view: first_bit_mismatch reports it
        return False
