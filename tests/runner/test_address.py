"""A group whose run folder is too deep for a Unix socket's path still starts: its controller
listens at an abstract address (harness/runner/address.py) instead of failing with "AF_UNIX
path too long"."""

from __future__ import annotations

import os
import tempfile

from harness.case.model import ModelSpec
from harness.case.spec import CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe
from harness.runner.address import (SUN_PATH_BYTES, controller_address, for_environment,
                                    from_environment)
from harness.runner.config import RunConfig
from harness.runner.group import RankGroup


def test_a_short_run_folder_keeps_its_socket_file_and_a_deep_one_gets_an_abstract_name():
    assert controller_address("/tmp/fp8h-run-abc") == "/tmp/fp8h-run-abc/ctl.sock"
    deep = "/tmp/" + "d" * 100 + "/fp8h-run-abc"
    address = controller_address(deep)
    assert address == "\0fp8h-run-abc-ctl.sock"
    told = for_environment(address)
    assert "\0" not in told and from_environment(told) == address
    assert from_environment(for_environment("/tmp/x/ctl.sock")) == "/tmp/x/ctl.sock"


def test_a_group_in_a_deep_temp_folder_starts_runs_a_case_and_leaves_nothing(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * max(1, SUN_PATH_BYTES - len(str(tmp_path))))
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    group = RankGroup(RunConfig(sut="emulated-patched", launcher="spawn", world_size=2, deadline_s=30.0)).start()
    try:
        assert len(os.fsencode(os.path.join(group.run_dir, "ctl.sock"))) >= SUN_PATH_BYTES
        case = CaseSpec(name="deep/one", model=ModelSpec(dims=(16, 16), recipe=DelayedScalingRecipe()), steps=2)
        outcome = group.run_case(0, case)
        assert not outcome.failures and sorted(outcome.results) == [0, 1]
        assert all(not r.failures for r in outcome.results.values()), outcome.results
    finally:
        group.stop()
    assert os.listdir(deep) == []
