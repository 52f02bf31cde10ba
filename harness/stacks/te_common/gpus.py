"""The GPUs this process may use, read through NVML without starting CUDA, and what ``--sut te``
refuses before any rank starts.

The runner forks its pristine zygote from a process that must not have started CUDA, so the
GPUs are counted and their compute capabilities read through NVML (``libnvidia-ml.so.1``,
which ``torch.cuda.device_count`` also uses), honouring ``CUDA_VISIBLE_DEVICES``.

Refused, in one line (exit 2), by :func:`world_refusal`:

* no GPU visible;
* a GPU the ranks would use without FP8 tensor cores: compute capability below 8.9 (TE's own
  FP8 check asks for 8.9, Ada, or later).

More ranks than GPUs are not refused: the ranks share the GPUs round-robin and TE reduces over
gloo (:mod:`harness.stacks.te_common.placement`; NCCL alone would end every case in "Duplicate GPU
detected" a few seconds in, measured: about 9 s, ``--sut te --world-size 2`` on one H200).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os

from harness.stacks.te_common.placement import Placement, local_ranks

FP8_CAPABILITY = (8, 9)


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int                       # as the ranks see it (after CUDA_VISIBLE_DEVICES)
    name: str
    capability: tuple[int, int] | None     # None: NVML could not tell


def visible_indices(value: str | None, uuids: list[str]) -> list[int] | None:
    """NVML indices of the devices ``CUDA_VISIBLE_DEVICES=value`` exposes, in CUDA's order.

    ``uuids`` are NVML's device UUIDs by index. Like CUDA, the list ends at the first entry that
    names no device. None for entries that cannot be resolved here (MIG instances).
    """
    if value is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            break
        if item.startswith("MIG-"):
            return None
        if item.lstrip("-").isdigit():
            index = int(item)
            if index < 0 or index >= len(uuids) or index in out:
                break
            out.append(index)
            continue
        matches = [i for i, u in enumerate(uuids) if u.startswith(item) or u.startswith("GPU-" + item)]
        if len(matches) != 1 or matches[0] in out:
            break
        out.append(matches[0])
    return out


class _Nvml:
    """The few NVML calls needed, through ctypes (no Python package required)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")

    def count(self) -> int:
        n = ctypes.c_uint(0)
        if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0:
            raise OSError("nvmlDeviceGetCount failed")
        return n.value

    def handle(self, index: int):
        h = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(h)) != 0:
            raise OSError(f"nvmlDeviceGetHandleByIndex({index}) failed")
        return h

    def _text(self, fn, h) -> str:
        buf = ctypes.create_string_buffer(96)
        return buf.value.decode(errors="replace") if fn(h, buf, ctypes.c_uint(96)) == 0 else "?"

    def uuid(self, h) -> str:
        return self._text(self.lib.nvmlDeviceGetUUID, h)

    def name(self, h) -> str:
        return self._text(self.lib.nvmlDeviceGetName, h)

    def capability(self, h) -> tuple[int, int] | None:
        major, minor = ctypes.c_int(), ctypes.c_int()
        if self.lib.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(major), ctypes.byref(minor)) != 0:
            return None
        return major.value, minor.value

    def close(self) -> None:
        self.lib.nvmlShutdown()


def visible_gpus() -> list[Gpu]:
    """The GPUs the ranks can use, in CUDA's order; empty where NVML is missing or fails."""
    try:
        nvml = _Nvml()
    except OSError:
        return []
    try:
        handles = [nvml.handle(i) for i in range(nvml.count())]
        indices = visible_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), [nvml.uuid(h) for h in handles])
        if indices is None:          # MIG: count as torch does, capabilities unknown
            import torch

            return [Gpu(i, "?", None) for i in range(torch.cuda.device_count())]
        return [Gpu(k, nvml.name(handles[i]), nvml.capability(handles[i])) for k, i in enumerate(indices)]
    except OSError:
        return []
    finally:
        nvml.close()


def world_refusal(world_size: int, gpus: list[Gpu], sut: str = "te") -> str | None:
    """Why ``--sut te`` cannot run ``world_size`` ranks on these GPUs (one line), or None.

    More ranks than GPUs run, sharing them (:mod:`harness.stacks.te_common.placement`)."""
    if not gpus:
        return (f"--sut {sut} --world-size {world_size}: no GPU visible here; TE's FP8 needs a CUDA GPU "
                f"(ranks beyond the GPUs share them round-robin, over gloo)")
    for gpu in gpus[:world_size]:
        if gpu.capability is not None and gpu.capability < FP8_CAPABILITY:
            cc = ".".join(map(str, gpu.capability))
            need = ".".join(map(str, FP8_CAPABILITY))
            return (f"--sut {sut}: GPU {gpu.index} ({gpu.name}, compute capability {cc}) has no FP8 support: "
                    f"TE's FP8 needs compute capability {need} or later")
    return None


def host_placement(world_size: int) -> Placement | None:
    """This host's placement of ``world_size`` ranks on the GPUs NVML sees (None: no GPU seen)."""
    count = len(visible_gpus())
    return Placement(local_ranks(world_size), count) if count else None
