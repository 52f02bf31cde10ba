"""What a case builds: the model's shape, recipe and construction (plain, frozen data)."""

from __future__ import annotations

import dataclasses

from harness.fp8.recipe import DelayedScalingRecipe

TP_LAYOUTS = ("column", "row")      # a tensor-parallel layer's layouts (ModelSpec.tp_layout)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What to build: a stack of Linear layers ``dims[0] -> dims[1] -> ... -> dims[-1]``.

    ``construction`` says how the FP8 weights get their first value:
    ``"init_cast"`` casts the initial weight with a dummy amax that never enters the history
    (TE's operation-based Linear at construction); ``"copy"`` then copies the initial value
    in from high precision, which records its amax (TE's tests set weights that way), so
    ``w_0`` enters the weight history at the first forward's autocast exit.
    """

    dims: tuple[int, ...]
    recipe: DelayedScalingRecipe
    fp8_params: bool = True
    construction: str = "copy"
    lr: float = 0.05
    data_parallel: bool = True
    userbuffers: bool = False          # one tensor-parallel layer over the group, Userbuffers-style
    tp_layout: str = "column"          # "column" (sequence-parallel all-gather in) or "row" (reduce-scatter out)
    overlap: bool = True               # userbuffers models: comm-GEMM overlap on, or plain collectives
    weight_grad: bool = True           # userbuffers models: the weight requires grad (else it stays frozen)
    bias: bool = False
    scaling: str = "delayed"           # "delayed" (TE's recipe); other stacks may offer e.g. "tensorwise"
