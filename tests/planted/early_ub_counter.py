"""The patched emulated stack whose Userbuffers producers raise a chunk's counter before its payload.

Every communicator the stack creates has its ``put`` replaced by one that stores the peer's
counter first and copies the chunk's header and bytes after it (what a Userbuffers kernel that
sets its flag before its copy has drained would do). Without a gap between the two, a consumer
nearly always finds the bytes there by the time it reads; the harness checks, at the store, that
the payload the counter announces has landed (``Arrivals.check_landed``).

    ./scripts/run --sut tests.planted.early_ub_counter:STACK --cases userbuffers/column

Its tests: ``tests/test_ub_early.py``.
"""

from __future__ import annotations

from harness.comm.integrity import HEADER_BYTES
from harness.stacks.emulated import userbuffers
from harness.stacks.emulated.stack import EmulatedStack


def _signal_first(comm):
    def put(dst, slot, nbytes, op, cancel=None):
        comm.wait_release(dst, op, cancel)
        comm.signal(dst, slot)                       # the bug: the counter before the payload
        h = comm.header_offset(slot)
        comm.data[dst].view(h, HEADER_BYTES).copy_(comm.data[comm.rank].view(h, HEADER_BYTES))
        comm.slot(dst, slot, nbytes).copy_(comm.slot(comm.rank, slot, nbytes))
    return put


class EarlyUbCounterStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-early-ub-counter"

    def forward_backward(self, model, inputs, grad_output):
        if getattr(model, "group", None) is not None and getattr(model.layers[0], "overlap", False):
            for comm in userbuffers.communicators(model.group, model.layers[0].deadline_s).values():
                if "put" not in vars(comm):
                    comm.put = _signal_first(comm)
        return super().forward_backward(model, inputs, grad_output)


STACK = EarlyUbCounterStack()
