"""The patched emulated stack whose Userbuffers release counters are kept in a few bits.

Every communicator the stack creates has its ``end_op`` replaced by one that stores the number
of operations it has completed modulo ``wrap`` (a counter kept in ``log2(wrap)`` bits) in its
peers' flag regions. Nothing shows for the first ``wrap - 1`` operations; at operation ``wrap``
the stored count falls back to 0 and the peer, waiting for its buffer to be released after
operation ``wrap - 1``, waits out its deadline. A process whose communicators see fewer
operations never meets it.

    ./scripts/run --sut tests.planted.ub_counter_wraps:WRAPS_AT_64 --cases userbuffers

Its tests: ``tests/test_long_process.py``.
"""

from __future__ import annotations

from harness.stacks.emulated import userbuffers
from harness.stacks.emulated.stack import EmulatedStack


def _wrapping_end_op(comm, wrap: int):
    def end_op():
        comm._seq += 1
        for peer, region in comm.flags.items():
            if peer != comm.rank:
                region.store(comm._release_counter(comm.rank), comm._seq % wrap)   # the bug: a few bits
    return end_op


class UbCounterWrapsStack(EmulatedStack):
    def __init__(self, wrap: int):
        super().__init__(buggy=False)
        self.wrap = wrap
        self.name = f"planted-ub-counter-wraps-at-{wrap}"

    def forward_backward(self, model, inputs, grad_output):
        if getattr(model, "group", None) is not None and getattr(model.layers[0], "overlap", False):
            self.patch(userbuffers.communicators(model.group, model.layers[0].deadline_s).values())
        return super().forward_backward(model, inputs, grad_output)

    def patch(self, comms) -> None:
        """Give each communicator not patched yet the wrapping counter."""
        for comm in comms:
            if "end_op" not in vars(comm):
                comm.end_op = _wrapping_end_op(comm, self.wrap)


WRAPS_AT_64 = UbCounterWrapsStack(64)
WRAPS_AT_128 = UbCounterWrapsStack(128)
WRAPS_AT_256 = UbCounterWrapsStack(256)
