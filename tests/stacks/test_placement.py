"""Ranks on GPUs for the TE stacks: one GPU per rank over NCCL, or ranks sharing GPUs round-robin over
gloo; the Userbuffers family declined where ranks share one, with TE's reason. GPU counts are faked:
nothing here needs a GPU."""

from __future__ import annotations

import dataclasses

import pytest
import torch.distributed as dist

from harness.stacks.te_common import gpus, groups, placement
from harness.stacks.te_common.gpus import Gpu
from harness.stacks.te_common.placement import Placement, Transport

H100 = Gpu(0, "NVIDIA H100 80GB HBM3", (9, 0))


@pytest.mark.parametrize("ranks,count,shared,transport,per_gpu", [
    (1, 1, False, Transport.NCCL, {0: [0]}),
    (2, 2, False, Transport.NCCL, {0: [0], 1: [1]}),
    (2, 4, False, Transport.NCCL, {0: [0], 1: [1]}),
    (2, 1, True, Transport.GLOO, {0: [0, 1]}),
    (4, 1, True, Transport.GLOO, {0: [0, 1, 2, 3]}),
    (5, 2, True, Transport.GLOO, {0: [0, 2, 4], 1: [1, 3]}),
])
def test_round_robin_and_the_transport(ranks, count, shared, transport, per_gpu):
    placed = Placement(ranks, count)
    assert placed.shared is shared and placed.transport is transport
    assert placed.ranks_per_gpu() == per_gpu
    assert [placed.gpu_of(r) for r in range(ranks)] == [r % count for r in range(ranks)]
    assert placed.to_dict()["transport"] == transport.value


def test_the_report_line_says_how_ranks_sit_and_what_te_reduces_over():
    assert Placement(2, 1).describe() == ("2 ranks sharing 1 GPU round-robin (GPU 0: ranks 0,1); "
                                          "TE's amax reductions and the gradient sync over gloo")
    assert Placement(2, 2).describe() == ("one GPU per rank (GPU 0: rank 0; GPU 1: rank 1); "
                                          "TE's amax reductions and the gradient sync over NCCL")


def test_a_placement_needs_a_rank_and_a_gpu():
    with pytest.raises(ValueError, match="at least one GPU"):
        Placement(2, 0)
    with pytest.raises(ValueError, match="at least one rank"):
        Placement(0, 1)


def test_the_ranks_on_this_host_come_from_the_launcher():
    assert placement.local_ranks(4, {}) == 4                                  # spawn: every rank here
    assert placement.local_ranks(16, {"LOCAL_WORLD_SIZE": "8"}) == 8          # torchrun
    assert placement.local_ranks(16, {"MPI_LOCALNRANKS": "8"}) == 8           # MPICH's hydra
    assert placement.local_rank(9, {"LOCAL_RANK": "1"}) == 1
    assert placement.local_rank(3, {}) == 3


def test_host_placement_reads_the_gpus_nvml_sees(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [H100])
    assert gpus.host_placement(2) == Placement(2, 1)
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [])
    assert gpus.host_placement(2) is None


def test_the_amax_group_is_gloo_where_ranks_share_a_gpu_and_nccl_otherwise(monkeypatch):
    made = []
    monkeypatch.setattr(dist, "get_backend", lambda group: "gloo")
    monkeypatch.setattr(dist, "get_process_group_ranks", lambda group: [0, 1])
    monkeypatch.setattr(dist, "new_group", lambda ranks, backend: made.append((tuple(ranks), backend)) or backend)
    amax = groups.AmaxGroups()
    assert amax.for_group("harness-gloo", Transport.GLOO) == "harness-gloo"   # already gloo: TE uses it
    assert made == []
    assert amax.for_group("harness-gloo", Transport.NCCL) == "nccl"
    assert amax.for_group("harness-gloo", Transport.NCCL) == "nccl"           # once per harness group
    assert made == [((0, 1), "nccl")]
    assert amax.for_group(None, Transport.NCCL) is None


def _ub_case(name):
    from harness.stacks.te.ub_cases import builtin_cases

    return next(c for c in builtin_cases() if c.name == name)


def test_the_userbuffers_family_is_declined_on_a_shared_gpu_with_tes_reason(monkeypatch):
    from harness.stacks.capabilities import capabilities_of, declined_reason
    from harness.stacks.te.declaration import CAPABILITIES

    class Declared:
        capabilities = CAPABILITIES

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [H100])
    caps = capabilities_of(Declared())
    overlap = declined_reason(caps, _ub_case("userbuffers/column"), 2)
    assert overlap == ("--sut te: 2 ranks share 1 GPU here; TE's Userbuffers map each peer's buffer from another "
                       "GPU through CUDA IPC and refuse ranks on one GPU (\"No peer-to-peer access available "
                       "between GPUs\")"), overlap
    plain = declined_reason(caps, _ub_case("userbuffers/column-no-overlap"), 2)
    assert plain is not None and "are NCCL's, which refuses two ranks on one GPU" in plain, plain
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [H100, dataclasses.replace(H100, index=1)])
    assert declined_reason(caps, _ub_case("userbuffers/column"), 2) is None


def test_the_report_names_the_placement(monkeypatch):
    from harness.stacks import run_info

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [H100])
    info = run_info("te1", 2)
    assert info["placement"]["transport"] == "gloo" and info["placement"]["ranks_per_gpu"] == {"0": [0, 1]}
    assert run_info("emulated-patched", 2) == {}
