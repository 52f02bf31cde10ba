"""The patched emulated stack whose Userbuffers consumers do not wait for the producer's signal.

Every communicator the stack creates has its ``wait_data`` replaced by a no-op: a consumer reads
a chunk whether or not the producer's counter says it was written (what a Userbuffers kernel that
skipped its flag wait would do).

    ./scripts/run --sut tests.planted.skips_ub_wait:STACK --cases userbuffers/column
"""

from __future__ import annotations

from harness.stacks.emulated import userbuffers
from harness.stacks.emulated.stack import EmulatedStack


def _no_wait(*args, **kwargs) -> None:
    return None


class SkipsUbWaitStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-skips-ub-wait"

    def forward_backward(self, model, inputs, grad_output):
        if getattr(model, "group", None) is not None and model.layers[0].overlap:
            comms = userbuffers.communicators(model.group, model.layers[0].deadline_s)
            for comm in comms.values():
                comm.wait_data = _no_wait
        return super().forward_backward(model, inputs, grad_output)


STACK = SkipsUbWaitStack()
