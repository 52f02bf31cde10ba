"""Hygiene says a stale key was a process group's id when the group a model held died.

Known bad: ``tests/planted/own_group_registry.py`` makes a process group for each model, keeps it on
the model, files a workspace under ``id(group)`` and never removes it when it destroys the group:
each entry is named as the id of a process group, never as a weight's, an activation's or an
unknown object's. The group is remembered weakly: the harness keeps no group alive.
"""

from __future__ import annotations

import gc

import torch.distributed as dist

from harness.case.catalog import builtin_cases
from harness.idreuse.tracker import walk_model, what_ids_were
from harness.runner.config import RunConfig
from harness.runner.session import run

CASES = {c.name: c for c in builtin_cases()}
TABLE = "tests.planted.own_group_registry.WORKSPACES"


def test_a_table_keyed_by_a_dead_groups_id_names_it_as_a_process_groups_id():
    report = run(RunConfig(sut="tests.planted.own_group_registry:STACK", launcher="spawn", world_size=2,
                           isolation=False, cases=[CASES["delayed/te-default"], CASES["repro/hygiene"]]))
    for case in report.cases:
        assert case.outcome == "failed" and case.oracle == "hygiene", (case.name, case.outcome, case.detail)
        lines = [line for line in case.detail.splitlines() if TABLE in line]
        assert lines, case.detail
        assert all(f"{TABLE} key holds id 0x" in line and "the id of a process group" in line
                   for line in lines), lines


def test_a_group_a_model_holds_is_recorded_weakly_and_named_when_it_died():
    class Model:
        pass

    model = Model()
    model.group = dist.ProcessGroup(dist.HashStore(), 0, 1)
    ident = id(model.group)
    [group] = [o for o in walk_model(model) if o.ident == ident]
    assert group.kind == "group" and group.desc == "model.group (ProcessGroup)", group
    del model
    gc.collect()
    assert not group.alive()          # the record kept nothing alive
    assert what_ids_were([group], set(), {})[ident] == "the id of a process group"
