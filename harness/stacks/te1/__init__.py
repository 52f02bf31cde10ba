"""``--sut te1``: Transformer Engine 1.x (1.12 and 1.13) on one CUDA GPU, beside the TE 2.x stack.

TE 1.12 is the last release with the id-keyed weight bookkeeping TE PR #1326 removed (its
``FP8GlobalStateManager.fp8_param_to_autocast`` and ``autocast_to_fp8_params``, and PR #575's
post-cast hook); TE 1.13 is the first without. This stack runs both, so the harness can be asked
whether it catches the bug in the release that shipped it and stays green on the one that fixed it.

What TE 1.x shares with TE 2.x is used from :mod:`harness.stacks.te`: the recipe
(:mod:`~harness.stacks.te_common.recipe`), the snapshot of ``fp8_meta`` and FP8 weights
(:mod:`~harness.stacks.te_common.snapshot`), the reference restricted to what TE reproduces bit for bit
(:mod:`~harness.stacks.te_common.compared`), case shapes (:func:`~harness.stacks.te.cases.fit_shapes`),
the model's dataclass and gradient sync (:mod:`~harness.stacks.te.model`), devices, GPU waits
and the installed release (:mod:`~harness.stacks.te_common.gpus`, :mod:`~harness.stacks.te_common.gpu_wait`,
:mod:`~harness.stacks.te_common.release`). What differs is here, one concept per file:

* :mod:`.stack` -- the stack object and ``load()`` (``--sut te1``);
* :mod:`.availability` -- whether TE 1.x and a GPU are here; TE 1.x's modules, imported without
  starting CUDA;
* :mod:`.onnx_standins` -- the two ONNX modules torch >= 2.11 lacks, stood in for so TE 1.x imports;
* :mod:`.model` -- building under ``fp8_model_init``, a step under ``fp8_autocast``, SGD;
* :mod:`.reuse` -- the reuse point before TE 1.x allocates an FP8 weight's ``_data``;
* :mod:`.global_state` -- TE 1.x's global FP8 registries (the id maps of 1.12 among them) and reset;
* :mod:`.reductions` -- every call of TE's amax reduction, into the ledger and the weight records;
* :mod:`.moments` -- when each release may update a weight's scale, and the pure check of the records;
* :mod:`.cases` -- the catalogue TE 1.x runs and what it declines, with reasons.

Every module imports without TE and without CUDA.
"""
