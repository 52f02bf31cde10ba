"""How a communicator overlaps communication with its GEMM: TE's three methods, and TE's choice
of method for each of its four communicators."""

from __future__ import annotations

import enum

from harness.errors import UsageError


class OverlapMethod(enum.Enum):
    """How a communicator overlaps communication with its GEMM (TE's three methods)."""

    RING_EXCHANGE = "ring_exchange"   # all-gather by ring exchange, overlapped with the GEMM
    PIPELINE = "pipeline"             # GEMM chunk by chunk, reduce-scatter of finished chunks
    BULK = "bulk"                     # one collective, no overlap

    @classmethod
    def parse(cls, value: "OverlapMethod | str") -> "OverlapMethod":
        if isinstance(value, cls):
            return value
        for member in cls:
            if member.value == str(value).lower():
                return member
        raise UsageError(f"overlap method {value!r} is not one of: "
                         f"{', '.join(m.value for m in cls)}")


# TE's forward-pass layout: column-parallel layers gather their input (ring exchange),
# row-parallel layers reduce-scatter their output (pipeline).
TE_DEFAULT_METHODS: dict[str, OverlapMethod] = {
    "qkv": OverlapMethod.RING_EXCHANGE,
    "proj": OverlapMethod.PIPELINE,
    "fc1": OverlapMethod.RING_EXCHANGE,
    "fc2": OverlapMethod.PIPELINE,
}
