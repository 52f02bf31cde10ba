"""What every Transformer Engine release's stack uses, TE 1.x (:mod:`harness.stacks.te1`) and TE 2.x
(:mod:`harness.stacks.te`) alike, none of it importing TE: the GPUs and how ranks are placed on them
(:mod:`.gpus`, :mod:`.placement`, :mod:`.groups`), bounded waits for the GPU (:mod:`.gpu_wait`), which
release is installed (:mod:`.release`), the recipe, the model record and its initialisers
(:mod:`.recipe`, :mod:`.layers`), the FP8 state read from TE's metas (:mod:`.snapshot`) and the
reference restricted to what TE reproduces bit for bit (:mod:`.compared`)."""
