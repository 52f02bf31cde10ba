"""Whether Transformer Engine and a CUDA device are here, checked without initialising CUDA.

The runner loads the stack, then forks the zygote its isolated runs start from; a process
that has initialised CUDA cannot use it in a forked child. So the device is counted through
NVML (``torch.cuda.device_count`` prefers it) and TE is only located, not imported: both stay
untouched until the first model is built.
"""

from __future__ import annotations

import importlib
import types

from harness.errors import SetupError
from harness.stacks.te_common import release


def missing_reason(sut: str = "te") -> str | None:
    """Why ``--sut te`` (or ``sut``, its buggy twin) cannot run here (one line), or None when it can."""
    if not release.found():
        return (f"--sut {sut}: transformer_engine is not installed here "
                "(pip install 'fp8-idreuse-harness[te]' on a machine with CUDA)")
    version = release.installed_version()
    if release.major(version) == 1:
        return release.line_refusal(sut, 2, "te1", version)
    import torch

    if not torch.backends.cuda.is_built() or torch.cuda.device_count() < 1:
        return f"--sut {sut}: Transformer Engine needs a CUDA device, and torch sees none here"
    return None


def require(sut: str = "te") -> None:
    """Raise :class:`SetupError` (exit 2, one line) when TE or a CUDA device is missing."""
    reason = missing_reason(sut)
    if reason is not None:
        raise SetupError(reason)


def te_modules() -> types.SimpleNamespace:
    """TE's PyTorch API, its recipe module, its global FP8 state manager and its FP8 tensor
    types, imported on first use (names as in TE 2.x; older 2.x spellings where they moved)."""
    try:
        te = importlib.import_module("transformer_engine.pytorch")
        recipe = importlib.import_module("transformer_engine.common.recipe")
    except Exception as exc:     # installed but broken (built for another torch or CUDA)
        raise SetupError(f"--sut te: transformer_engine is installed but does not import: "
                         f"{type(exc).__name__}: {exc}") from None
    try:
        quantization = importlib.import_module("transformer_engine.pytorch.quantization")
    except ImportError:          # TE 2.x before the module was renamed
        quantization = importlib.import_module("transformer_engine.pytorch.fp8")
    float8 = importlib.import_module("transformer_engine.pytorch.tensor.float8_tensor")
    return types.SimpleNamespace(te=te, recipe=recipe, state_manager=quantization.FP8GlobalStateManager,
                                 Float8Tensor=float8.Float8Tensor, Float8Quantizer=float8.Float8Quantizer)


def ub_modules() -> types.SimpleNamespace:
    """What the Userbuffers cases use besides :func:`te_modules`: TE's fusible ops, the module
    holding ``initialize_ub``/``destroy_ub``, and the two fused Userbuffers modules (whose
    ``general_gemm`` the progress record wraps)."""
    try:
        ops = importlib.import_module("transformer_engine.pytorch.ops")
        base = importlib.import_module("transformer_engine.pytorch.module.base")
        forward = importlib.import_module("transformer_engine.pytorch.ops.fused.userbuffers_forward_linear")
        backward = importlib.import_module("transformer_engine.pytorch.ops.fused.userbuffers_backward_linear")
    except Exception as exc:
        raise SetupError(f"--sut te: Transformer Engine's fusible ops with Userbuffers do not import: "
                         f"{type(exc).__name__}: {exc}") from None
    return types.SimpleNamespace(ops=ops, base=base, fused=(forward, backward))
