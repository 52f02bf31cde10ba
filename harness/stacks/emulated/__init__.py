"""The built-in emulated FP8 stacks: a CPU model of TE 1.x's FP8 infrastructure.

``emulated-patched`` is the post-fix design (TE PR #1326, first released in 1.13);
``emulated-buggy`` adds exactly the pre-fix id bookkeeping and post-cast hook
(:mod:`harness.stacks.emulated.id_bookkeeping`), nothing else.

One concept per file: kernels (cast, fused update), meta, global amax buffers, autocast and
model-init contexts, the FP8 parameter type, the Linear layer, the model and its optimizer,
and the stack object implementing :class:`harness.stacks.protocol.Stack`.
"""
