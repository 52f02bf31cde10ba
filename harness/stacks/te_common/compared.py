"""What ``--sut te`` compares with the bit-exact reference, and what it leaves out.

The reference (:mod:`harness.reference`) computes GEMMs as fp32 matmuls of dequantized
values on the CPU. TE computes them on tensor cores: FP8 operands, the scales applied to the
accumulated sum, TE's own accumulation. Both are right, and they differ in low bits. Every
value downstream of a GEMM therefore differs legitimately: a deeper layer's input (the layer
before's output), every grad_output but the last layer's (a dgrad), and every weight after the
first optimizer step (it adds a wgrad). What depends only on the seeded data and on TE's
delayed-scaling machinery must agree bit for bit, and is compared:

* ``layer0.input`` at every step: amax history and scale (the inputs come from seeds; the
  amax reduction over the group, the history roll and the scale update are TE's);
* the last layer's ``grad_output`` at every step: amax history and scale (likewise);
* every ``layer{i}.weight`` at step 0 (before any optimizer step): amax history and scale, and
  with FP8 weights the FP8 bytes of the weight cast and the weight's private scale_inv.

Not compared: what ``forward_backward`` returns (the output, the input gradient, the weight
gradients: every one a GEMM result, so the expectation leaves them out), the meta's scale_inv (TE 2.x keeps none in ``fp8_meta``: a scale_inv lives with
each FP8 tensor), the FP8 bytes of input and grad_output casts (TE casts them inside its
layers and does not keep them where the adapter could read them), everything listed above as
downstream of a GEMM, and the final weights. The snapshot still carries every role's history
and scale: the cross-rank oracle compares them between ranks, and the isolation oracle's
digest covers them, whole.

Userbuffers cases (one tensor-parallel layer, :mod:`.ub_model`) compare the same roles, which
for one layer are its input, its output gradient and, at step 0, its weight shard: the
input's amax is of this rank's sequence shard (column-parallel) or hidden shard (row), the
output gradient's of its own shard, all reduced over the group by TE's autocast. None of them
passes through a GEMM or through a Userbuffers buffer. What does (the all-gathered input each
rank's GEMM reads, the reduce-scattered outputs and gradients, every weight after the first
optimizer step) is not compared. The reference there is the tensor-parallel one
(:mod:`harness.reference.tensor_parallel`) on data rounded to bf16, the dtype TE's
Userbuffers run in.
"""

from __future__ import annotations

import dataclasses

from harness.reference.meta import ExpectedModel
from harness.reference import expected_model as reference_model
from harness.stacks.protocol import RoleState


def compared_roles(n_layers: int, step: int) -> list[str]:
    """The snapshot keys compared at ``step``."""
    keys = ["layer0.input", f"layer{n_layers - 1}.grad_output"]
    if step == 0:
        keys += [f"layer{i}.weight" for i in range(n_layers)]
    return keys


def comparable(state: RoleState, role: str, fp8_weights: bool) -> RoleState:
    """The fields of a role's state that are compared; the others become None."""
    keep_bytes = role == "weight" and fp8_weights
    return dataclasses.replace(state, scale_inv=None,
                               fp8_bytes=state.fp8_bytes if keep_bytes else None,
                               fp8_scale_inv=state.fp8_scale_inv if keep_bytes else None)


def expected_model(case, run_seed: int, world_size: int, rank: int, model_index: int) -> ExpectedModel:
    """The reference's expectation of a case of ``te.Linear`` layers, restricted to what TE must
    reproduce bit for bit (the Userbuffers family's is TE 2.x's: :mod:`harness.stacks.te.stack`)."""
    return restricted(reference_model(case, run_seed, world_size, rank, model_index), case)


def restricted(full, case) -> ExpectedModel:
    """The reference model ``full`` of ``case``, restricted to the roles and steps TE reproduces."""
    n_layers = len(case.model.dims) - 1
    steps = []
    for t, states in enumerate(full.steps):
        steps.append({key: comparable(states[key], key.split(".", 1)[1], case.model.fp8_params)
                      for key in compared_roles(n_layers, t)})
    return ExpectedModel(steps=steps, final={}, outputs=[])
