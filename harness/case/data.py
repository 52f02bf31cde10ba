"""Seeded data: every rank can recompute every other rank's tensors without communicating.

Each tensor comes from its own generator, seeded from a hash of (run seed, case, model
index, role, step, rank), so adding a case or reordering cases changes nothing else.
"""

from __future__ import annotations

import hashlib

import torch

from harness.case.spec import CaseSpec


def derive_seed(*parts) -> int:
    """A 63-bit seed from the parts' text (sha256, so stable across processes and Python runs)."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _normal(shape, *parts, std: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(derive_seed(*parts))
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * std


def initial_weights(case: CaseSpec, model_index: int, run_seed: int) -> list[torch.Tensor]:
    """One fp32 ``[out, in]`` tensor per layer; the same on every rank."""
    dims = case.model.dims
    return [
        _normal((dims[i + 1], dims[i]), run_seed, case.data_seed, case.name, model_index, "w0", i,
                std=1.0 / dims[i] ** 0.5)
        for i in range(len(dims) - 1)
    ]


def _special(x: torch.Tensor, special: str) -> torch.Tensor:
    if special == "zero":
        return torch.zeros_like(x)
    if special == "inf":
        x = x.clone()
        x.view(-1)[0] = float("inf")
        return x
    if special == "nan":
        x = x.clone()
        x.view(-1)[0] = float("nan")
        return x
    if special == "tiny":
        # amax ~1e-40 (subnormal): scaled_max / amax overflows to inf, so the scale becomes FLT_MAX
        return x * 1e-40
    if special == "huge":
        return x * 1e6
    return x


def step_inputs(case: CaseSpec, model_index: int, step: int, rank: int, run_seed: int,
                micro_batch: int = 0) -> torch.Tensor:
    """The ``[batch, dims[0]]`` input of one rank at one step; special values enter at step 1."""
    x = _normal((case.batch, case.model.dims[0]), run_seed, case.data_seed, case.name, model_index,
                "x", step, rank, micro_batch, std=1.0)
    if step == min(1, case.steps - 1):
        x = _special(x, case.special)
    return x


def step_grad_output(case: CaseSpec, model_index: int, step: int, rank: int, run_seed: int,
                     micro_batch: int = 0) -> torch.Tensor:
    """The ``[batch, dims[-1]]`` gradient of the loss w.r.t. the output, of one rank at one step."""
    return _normal((case.batch, case.model.dims[-1]), run_seed, case.data_seed, case.name, model_index,
                   "dy", step, rank, micro_batch, std=0.01)


def tp_tensor(case: CaseSpec, model_index: int, role: str, step: int, rank: int, run_seed: int,
              shape: tuple[int, ...], std: float) -> torch.Tensor:
    """A rank's slice of a tensor-parallel (Userbuffers) case's data: inputs and output gradients
    whose shapes depend on the layout (sequence shard, or hidden shard); special values at step 1."""
    x = _normal(shape, run_seed, case.data_seed, case.name, model_index, "tp", role, step, rank, std=std)
    if role == "x" and step == min(1, case.steps - 1):
        x = _special(x, case.special)
    return x


def tp_shapes(case: CaseSpec, world_size: int) -> dict[str, tuple[int, int]]:
    """Per-rank shapes of a tensor-parallel layer ``k -> n`` with ``batch`` rows per rank.

    column (sequence parallel in): x [m_local, k], weight shard [n/tp, k], dy [m, n/tp]
    row (reduce-scatter out):      x [m, k/tp],    weight shard [n, k/tp], dy [m_local, n]
    """
    k, n = case.model.dims[0], case.model.dims[-1]
    ml, m = case.batch, case.batch * world_size
    if case.model.tp_layout == "column":
        return {"x": (ml, k), "w": (n // world_size, k), "dy": (m, n // world_size)}
    return {"x": (m, k // world_size), "w": (n, k // world_size), "dy": (ml, n)}


def weight_shard(full: torch.Tensor, layout: str, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s shard of an ``[n, k]`` weight: rows (column-parallel) or columns (row-parallel)."""
    if layout == "column":
        nl = full.shape[0] // world_size
        return full[rank * nl:(rank + 1) * nl].clone()
    kl = full.shape[1] // world_size
    return full[:, rank * kl:(rank + 1) * kl].contiguous().clone()
