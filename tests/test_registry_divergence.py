"""Registries compared across ranks before each collective: a one-rank divergence is named where
it happened.

Known bad: ``tests/planted/prunes_on_one_rank.py`` drops a dead model's metas from the amax
buffers on rank 1 only. The first collective after that reports the registry, both sizes and the
collective at which the ranks still agreed, ahead of the all-reduce size mismatch it leads to.
"""

from __future__ import annotations

import json

import pytest
import torch

from harness.case.catalog import builtin_cases
from harness.collectives.registry_digest import key_shape, registry_digest, registry_divergence, registry_summary
from harness.collectives.precheck import CollectiveMismatch, CollectivePrecheck
from harness.runner.config import RunConfig
from harness.runner.session import run

ID_A, ID_B = 0x7F0000001000, 0x7F0000002008


def test_key_shapes_blank_ids_and_keep_everything_else():
    assert key_shape(ID_A) == key_shape(ID_B) == "id"
    assert key_shape(16) == "16" and key_shape("fwd") == "'fwd'"
    assert key_shape(("fwd", (("margin", 0),), (0, 1))) == "('fwd',(('margin',0)),(0,1))"
    assert key_shape(torch.zeros(2, 3)) == "Ttorch.float32[2, 3]"


def test_registries_that_differ_only_in_ids_agree_and_a_pruned_one_does_not():
    rank0 = {"by_id": {ID_A: ("k", 1)}, "buffers": {("fwd", "k"): [object(), object()]}}
    rank1 = {"by_id": {ID_B: ("k", 1)}, "buffers": {("fwd", "k"): [object(), object()]}}
    assert registry_summary(rank0) == registry_summary(rank1)
    assert registry_digest(rank0) == registry_digest(rank1)
    assert registry_divergence(registry_summary(rank0), registry_summary(rank1), 0, 1) == []
    rank1["buffers"][("fwd", "k")].pop()
    lines = registry_divergence(registry_summary(rank0), registry_summary(rank1), 0, 1)
    assert len(lines) == 1 and lines[0].startswith("buffers: rank 0: 1 keys, 2 entries (shape digest ")
    assert "; rank 1: 1 keys, 1 entries (shape digest " in lines[0]
    assert registry_digest(rank0) != registry_digest(rank1)
    assert registry_divergence(None, registry_summary(rank1), 0, 1) == []


class _Stack:
    def __init__(self, regs):
        self.regs = regs

    def registries(self):
        return self.regs


def _entry(seq: int, site: str) -> dict:
    return {"seq": seq, "op": "all_reduce", "group": [0, 1], "reduce": "MAX", "shapes": [[4]],
            "dtypes": ["float32"], "sites": [site]}


def test_the_precheck_names_the_registry_and_where_the_ranks_last_agreed():
    import torch.distributed as dist

    store = dist.HashStore()
    rank0 = CollectivePrecheck(store, 0, 5.0)
    rank0.begin_case("c")
    regs = {"buffers": {"fwd": [1, 2]}}
    rank0.watch(_Stack(regs))
    peer = registry_summary(regs)
    store.set("pc/c/0/1", json.dumps({"sig": {"op": "all_reduce", "group": [0, 1], "reduce": "MAX",
                                              "shapes": [[4]], "dtypes": ["float32"]},
                                      "sites": ["model.py:7 sync"], "regs": peer}))
    rank0(_entry(0, "model.py:7 sync"))                      # agree
    store.set("pc/c/1/1", json.dumps({"sig": {"op": "all_reduce", "group": [0, 1], "reduce": "MAX",
                                              "shapes": [[4]], "dtypes": ["float32"]},
                                      "sites": ["model.py:9 exit"], "regs": {"buffers": [1, 1, "x"]}}))
    with pytest.raises(CollectiveMismatch) as info:
        rank0(_entry(1, "model.py:9 exit"))
    text = str(info.value)
    assert text.startswith("registries differ between ranks before collective #1 (they agreed at collective #0 "
                           "at model.py:7 sync):\n  buffers: rank 0: 1 keys, 2 entries")
    assert "rank 1: 1 keys, 1 entries (shape digest x)" in text
    assert "rank 0: all_reduce MAX float32[4] at model.py:9 exit" in text


def test_registries_pruned_on_one_rank_are_reported_where_they_diverged():
    case = next(c for c in builtin_cases() if c.name == "delayed/wide")
    [report] = run(RunConfig(sut="tests.planted.prunes_on_one_rank:STACK", launcher="spawn", world_size=2,
                             isolation=False, cases=[case], reuse="natural", deadline_s=5.0)).cases
    assert report.outcome == "failed" and report.oracle == "cross-rank", report.detail
    first = report.detail.splitlines()
    # the first collective after model 0 was destroyed (model 1's first autocast exit); they last agreed
    # at model 0's last gradient sync
    assert first[0].startswith("[cross-rank] rank 0: CollectiveMismatch: registries differ between ranks before "
                               "collective #"), report.detail
    assert "(they agreed at collective #" in first[0] and "sync_gradients" in first[0], first[0]
    assert first[1].startswith("  amax_buffers.buffers: rank 0: 2 keys, 4 entries"), first[1]
    assert "; rank 1: 2 keys, 2 entries" in first[1], first[1]
    assert "all_reduce MAX float32[4] at harness/stacks/emulated/amax_buffers.py" in report.detail
    assert "all_reduce MAX float32[2] at harness/stacks/emulated/amax_buffers.py" in report.detail


def test_addresses_written_in_a_string_key_are_blanked_and_other_numbers_kept():
    from harness.collectives.registry_digest import key_shape

    class Group:
        pass

    a, b = Group(), Group()
    # TE 1.x keys its buffers on f"{recipe}:{hash(group)}": the same key on two ranks differs only there
    assert key_shape(f"DelayedScaling(margin=0):{hash(a)}") == key_shape(f"DelayedScaling(margin=0):{hash(b)}")
    assert key_shape(f"x:{id(a)}") == key_shape(f"x:{id(b)}") == repr("x:id")
    assert key_shape(repr(a)).endswith(" at id>'")
    assert key_shape("amax_history_len=1024, step 12345678") == repr("amax_history_len=1024, step 12345678")
    assert key_shape("recipe:16") != key_shape("recipe:1024")
