"""The TE 1.x stack on the CPU over the stand-in TE 1.x (``tests/stacks/fake_te1``), loadable by
ranks of their own (``--sut tests.stacks.fake_te1_cpu:load``, with the stand-in on
``PYTHONPATH``): how the tests run that stack's adapter at world size 2 and more without a GPU.
Every rank uses the CPU; TE's reductions go over the harness's gloo group, as where ranks share
a GPU. Nothing here is a validation of TE: scripts/te1-validate runs the real releases.

``FAKE_TE1_LOCAL_AMAX=1`` (a known-bad check, for the tests): the weight-update check is given
no reduced amax, so it takes each rank's own, as it did when it ran one rank only."""

from __future__ import annotations

import os

import torch

from harness.stacks.te_common import release
from harness.stacks.te1 import onnx_standins
from harness.stacks.te1 import stack as te1_stack

te1_stack.select_device = lambda rank: torch.device("cpu")
if os.environ.get("FAKE_TE1_LOCAL_AMAX") == "1":
    from harness.stacks.te1 import reductions

    reductions.reduced_amax = lambda layer, found: None


class CpuTE1Stack(te1_stack.TE1Stack):
    def check_world_size(self, world_size: int) -> None:
        return None

    def _wait(self, device, what: str) -> None:
        return None


def load() -> CpuTE1Stack:
    onnx_standins.install()
    return CpuTE1Stack(release.installed_version())
