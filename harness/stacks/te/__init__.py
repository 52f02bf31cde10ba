"""The ``te`` stack: real Transformer Engine on CUDA (``--sut te``). See :mod:`harness.stacks.te.stack`."""
