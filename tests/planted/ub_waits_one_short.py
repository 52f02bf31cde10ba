"""The patched emulated stack whose Userbuffers consumers wait for one count too few.

Every communicator the stack creates has its ``wait_data`` replaced by one that waits until the
producer's counter reaches the count of the *previous* write of the slot, then books the wait as
if it had seen this one (an off-by-one in a consumer's expected flag value). The consumer reads
whatever the slot holds; without a gap between payload and counter it is nearly always the right
chunk already.

    ./scripts/run --sut tests.planted.ub_waits_one_short:STACK --cases userbuffers/row

Its tests: ``tests/test_ub_early.py``.
"""

from __future__ import annotations

from harness.comm.flags import wait_counter
from harness.stacks.emulated import userbuffers
from harness.stacks.emulated.stack import EmulatedStack


def _one_short(comm):
    def wait_data(src, slot, op, chunk, cancel=None):
        key = (src, slot)
        expected = comm._recv.get(key, 0) + 1
        wait_counter(comm.flags[comm.rank], src * comm.world_size + slot, expected - 1, comm.deadline_s,
                     lambda seen: f"rank {comm.rank} waiting for chunk {chunk} from rank {src} (counter {seen})",
                     "", cancel)                  # the bug: one count too few
        comm._recv[key] = expected
    return wait_data


class UbWaitsOneShortStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-ub-waits-one-short"

    def forward_backward(self, model, inputs, grad_output):
        if getattr(model, "group", None) is not None and getattr(model.layers[0], "overlap", False):
            for comm in userbuffers.communicators(model.group, model.layers[0].deadline_s).values():
                if "wait_data" not in vars(comm):
                    comm.wait_data = _one_short(comm)
        return super().forward_backward(model, inputs, grad_output)


STACK = UbWaitsOneShortStack()
