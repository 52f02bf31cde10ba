"""``--sut te``: Transformer Engine 2.x on CUDA, as a :class:`harness.stacks.protocol.Stack`.

A real stack, not a model of one: the layers are TE's ``te.Linear`` with FP8 parameters made
under TE's model-init context, trained under TE's autocast with a ``DelayedScaling`` recipe;
the casts, GEMMs, amax reductions and scale updates are TE's own kernels and code. The
adapter adds only what the harness needs around it.

One concept per file:

* :mod:`.stack` -- the stack object, ``load()`` (``--sut te``) and ``load_buggy()``
  (``--sut te-buggy``, the same as ``--sut te --inject id-hook``);
* :mod:`.availability` -- whether TE and a CUDA device are here, without initialising CUDA;
* :mod:`.recipe` -- our :class:`~harness.fp8.recipe.DelayedScalingRecipe` as TE's recipe;
* :mod:`.groups` -- the NCCL group TE reduces amaxes over, beside the harness's gloo group;
* :mod:`.model` -- building the model, a step under autocast, gradient sync and SGD;
* :mod:`.snapshot` -- reading each role's state from TE's ``fp8_meta`` and FP8 weights;
* :mod:`.compared` -- what is compared with the bit-exact reference, and what is not;
* :mod:`.cases` -- TE's case catalogue (the built-in one, in shapes TE's FP8 GEMMs accept);
* :mod:`.declaration` -- what the stack runs, for the runners, stress and the build;
* :mod:`.global_state` -- TE's process-global FP8 state, for ``registries()`` and ``reset()``;
* :mod:`.reuse` -- where the harness may force id reuse: right before TE allocates ``_data``;
* :mod:`.id_hook` -- ``te-buggy``: the pre-fix id-keyed post-cast hook, put back on purpose;
* :mod:`.retention_loop` -- a long build-and-destroy loop measuring what dead models leave;
* :mod:`.gpus` -- the GPUs here, read through NVML, and what ``--sut te`` refuses before any rank starts;
* :mod:`.gpu_wait` -- waiting for a rank's GPU with the deadline, and saying what it is stuck on;

and the Userbuffers family (one tensor-parallel layer of TE's fusible ops, comm-GEMM overlap):

* :mod:`.ub_cases` -- its catalogue in TE's shapes, and what it declines;
* :mod:`.ub_model` -- building the layer, a step, SGD;
* :mod:`.userbuffers` -- TE's communicators: ``initialize_ub`` once per process and group, ``destroy_ub``;
* :mod:`.ub_progress` -- the exchanges TE issued and where the GPU is in them (which chunk of which rank).

Every module imports without Transformer Engine and without CUDA: loading the stack (the
controller does, to read its declaration) imports no TE. A rank imports TE once, in
``TEStack.preload`` before it forks the pristine zygote its isolated runs start from, so no
isolated run pays TE's import again; importing TE leaves CUDA uninitialised, and CUDA is first
used when a model is built (a CUDA context does not survive ``fork``).
"""
