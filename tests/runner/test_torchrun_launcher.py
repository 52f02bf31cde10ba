"""A group started by torchrun keeps its agent's folder in the group's run folder, so nothing of
it outlives the group (torchrun alone makes a /tmp/torchelastic_* folder per launch and never
removes it)."""

from __future__ import annotations

import os

import pytest

from harness.runner.config import RunConfig
from harness.runner.group import RankGroup
from harness.runner.launchers.torchrun import agent_log_dir, torchrun_path


pytestmark = pytest.mark.skipif(torchrun_path() is None, reason="no torchrun")


def test_the_torchrun_agents_folder_is_in_the_run_folder_and_goes_with_it():
    group = RankGroup(RunConfig(sut="emulated-patched", launcher="torchrun", world_size=2, deadline_s=30.0)).start()
    try:
        run_dir = group.run_dir
        agent = agent_log_dir(run_dir)
        # The agent made its folder for this launch (one per rank below it) where it was told to.
        assert os.path.isdir(agent) and os.listdir(agent), os.listdir(run_dir)
    finally:
        group.stop()
    assert not os.path.exists(run_dir)
