"""What the overlapped operations must compute, as plain local PyTorch (for bitwise checks).

Each function follows the operation's documented order of floating-point work, not an
idealised one: ``ring_allgather_gemm`` multiplies chunk by chunk, and one big GEMM over the
concatenated input can round differently (the BLAS blocks a taller matrix differently), so
the reference multiplies chunk by chunk as well; ``gemm_reduce_scatter`` sums partials in
rank order 0, 1, ..., so the reference folds them in that order.
"""

from __future__ import annotations

from typing import Sequence

import torch

from harness.fp8.cast import dequantize
from harness.fp8.formats import Fp8Format


def reference_ring_allgather_gemm(
    chunks_fp8: Sequence[torch.Tensor],
    scale_inv_consumer: torch.Tensor,
    fmt: Fp8Format,
    weight_hp: torch.Tensor,
) -> torch.Tensor:
    """``ring_allgather_gemm``'s output on a rank whose scale_inv is ``scale_inv_consumer``.

    ``chunks_fp8[c]`` is rank ``c``'s ``uint8 [m_local, k]`` chunk. Every chunk is
    dequantized with the consumer's scale_inv (whatever its producer cast with) and
    multiplied on its own, in float32; rows in rank order.
    """
    weight = weight_hp.detach().to(torch.float32)
    scale_inv = torch.as_tensor(scale_inv_consumer).reshape(()).to(torch.float32)
    return torch.cat([dequantize(chunk, scale_inv, fmt) @ weight.t() for chunk in chunks_fp8])


def reference_allgather(chunks: Sequence[torch.Tensor]) -> torch.Tensor:
    """``bulk_allgather``'s output: the chunks concatenated in rank order."""
    return torch.cat([c.detach() for c in chunks])


def reference_reduce_scatter(partials: Sequence[torch.Tensor], rank: int) -> torch.Tensor:
    """``bulk_reduce_scatter``'s output on ``rank``: its chunk of every rank's partial,
    folded in rank order ``((p_0 + p_1) + p_2) + ...``."""
    tp = len(partials)
    mc = partials[0].shape[0] // tp
    parts = [p.detach()[rank * mc:(rank + 1) * mc] for p in partials]
    acc = parts[0].clone()
    for part in parts[1:]:
        acc = acc + part
    return acc


def reference_gemm_reduce_scatter(
    inputs_hp: Sequence[torch.Tensor],
    weights_hp: Sequence[torch.Tensor],
    rank: int,
) -> torch.Tensor:
    """``gemm_reduce_scatter``'s output on ``rank``: for each rank ``src``, the partial
    ``inputs_hp[src][rows of chunk rank] @ weights_hp[src].T`` (float32, computed on that
    chunk's rows alone, as the pipeline does), folded in rank order."""
    tp = len(inputs_hp)
    mc = inputs_hp[0].shape[0] // tp
    parts = [inputs_hp[src].detach().to(torch.float32)[rank * mc:(rank + 1) * mc]
             @ weights_hp[src].detach().to(torch.float32).t() for src in range(tp)]
    acc = parts[0].clone()
    for part in parts[1:]:
        acc = acc + part
    return acc
