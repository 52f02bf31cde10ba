"""``--sut te`` refuses, before any rank starts, what this machine's GPUs cannot run: no GPU, or a GPU
without FP8; more ranks than GPUs share them. Runs without TE and without a GPU: both are faked here."""

from __future__ import annotations

import pytest

from harness.stacks.te import availability
from harness.stacks.te_common import gpus
from harness.stacks.te_common.gpus import Gpu

H200 = Gpu(0, "NVIDIA H200", (9, 0))


def test_world_refusal():
    assert gpus.world_refusal(1, [H200]) is None
    assert gpus.world_refusal(2, [H200, Gpu(1, "NVIDIA H200", (9, 0))]) is None
    assert gpus.world_refusal(2, [H200]) is None                          # two ranks share the GPU
    assert gpus.world_refusal(4, [H200]) is None
    assert gpus.world_refusal(2, []) == ("--sut te --world-size 2: no GPU visible here; TE's FP8 needs a CUDA GPU "
                                         "(ranks beyond the GPUs share them round-robin, over gloo)")
    a100 = Gpu(1, "NVIDIA A100-SXM4-80GB", (8, 0))
    assert gpus.world_refusal(2, [H200, a100], "te-buggy") == (
        "--sut te-buggy: GPU 1 (NVIDIA A100-SXM4-80GB, compute capability 8.0) has no FP8 support: "
        "TE's FP8 needs compute capability 8.9 or later")
    assert gpus.world_refusal(1, [H200, a100]) is None                    # rank 0 only uses GPU 0
    assert gpus.world_refusal(1, [Gpu(0, "L4", (8, 9))]) is None
    assert gpus.world_refusal(1, [Gpu(0, "?", None)]) is None             # unknown: not refused on a guess


def test_visible_indices_follow_cuda_visible_devices():
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"]
    assert gpus.visible_indices(None, uuids) == [0, 1, 2]
    assert gpus.visible_indices("2,0", uuids) == [2, 0]
    assert gpus.visible_indices("0,7,1", uuids) == [0]                   # CUDA stops at the first bad entry
    assert gpus.visible_indices("1,1", uuids) == [1]
    assert gpus.visible_indices("GPU-bbbb,cccc", uuids) == [1, 2]
    assert gpus.visible_indices("", uuids) == []
    assert gpus.visible_indices("-1", uuids) == []
    assert gpus.visible_indices("MIG-1234", uuids) is None


def test_nvml_absent_means_no_gpu(monkeypatch):
    def no_nvml():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(gpus, "_Nvml", no_nvml)
    assert gpus.visible_gpus() == []


@pytest.fixture
def faked_te(monkeypatch):
    """TE 'installed' and NVML reporting what the test says; CUDA_DEVICE_MAX_CONNECTIONS restored."""
    monkeypatch.setattr(availability, "missing_reason", lambda sut="te": None)
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")

    def visible(found):
        monkeypatch.setattr(gpus, "visible_gpus", lambda: list(found))

    return visible


def test_cli_refuses_no_gpu_in_one_line(faked_te, capsys):
    from harness.cli import main

    faked_te([])
    assert main(["run", "--sut", "te", "--world-size", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --sut te --world-size 2: no GPU visible here; TE's FP8 needs a CUDA GPU (ranks beyond "
                   "the GPUs share them round-robin, over gloo)"], err


def test_cli_accepts_more_ranks_than_gpus(faked_te, capsys):
    from harness.cli import main

    faked_te([H200])
    assert main(["run", "--sut", "te", "--world-size", "4", "--list"]) == 0
    assert "delayed/" in capsys.readouterr().out


def test_cli_refuses_a_gpu_without_fp8(faked_te, capsys):
    from harness.cli import main

    faked_te([Gpu(0, "Tesla V100", (7, 0)), Gpu(1, "Tesla V100", (7, 0))])
    assert main(["run", "--sut", "te-buggy", "--world-size", "2", "--reuse", "asymmetric"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GPU 0 (Tesla V100, compute capability 7.0) has no FP8 support" in err[0], err


def test_cli_accepts_two_h200s_and_a_selection_sees_the_userbuffers_family(faked_te, capsys):
    from harness.cli import main

    faked_te([H200, Gpu(1, "NVIDIA H200", (9, 0))])
    assert main(["run", "--sut", "te", "--world-size", "2", "--cases", "userbuffers", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "userbuffers/column" in listed and "userbuffers/row-bias-frozen" in listed, listed
    assert "userbuffers/init-cast-margin3" not in listed and "delayed/" not in listed, listed
    assert main(["run", "--sut", "te", "--world-size", "2", "--list"]) == 0
    assert "userbuffers/" not in capsys.readouterr().out        # a plain run leaves the family out


def test_te_buggy_refusal_names_te_buggy(monkeypatch, capsys):
    """Without TE, ``--sut te-buggy`` is refused naming ``--sut te-buggy``, not ``--sut te``."""
    from harness.cli import main
    from harness.stacks.te_common import release

    monkeypatch.setattr(release, "found", lambda: False)
    assert main(["run", "--sut", "te-buggy", "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --sut te-buggy: transformer_engine is not installed"), err
