"""``--sut te``: Transformer Engine on CUDA. Until the adapter lands, this only says, in one line,
what this machine lacks (Transformer Engine, or a CUDA device) or that the adapter is missing."""

from __future__ import annotations

import importlib.util

from harness.errors import SetupError


def load(inject=None):
    if importlib.util.find_spec("transformer_engine") is None:
        raise SetupError("--sut te: transformer_engine is not installed here "
                         "(pip install 'fp8-idreuse-harness[te]' on a machine with CUDA)")
    import torch

    if not torch.cuda.is_available():
        raise SetupError("--sut te: Transformer Engine needs a CUDA device, and torch sees none here")
    raise SetupError("--sut te: the Transformer Engine adapter is not part of this build yet")
