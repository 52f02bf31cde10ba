"""The patched emulated stack, saying it sees GPUs (``FAKE_GPU_COUNT``, default 4): how the
tests place ``stress --groups`` on GPUs that this machine does not have. Nothing runs on them.

    python -m harness stress --sut tests.stacks.fake_gpus:STACK --world-size 2 --groups 3 --out DIR
"""

from __future__ import annotations

import os

from harness.stacks.emulated.stack import EmulatedStack


class FakeGpuStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)

    def gpu_count(self) -> int:
        return int(os.environ.get("FAKE_GPU_COUNT", "4"))


STACK = FakeGpuStack()
