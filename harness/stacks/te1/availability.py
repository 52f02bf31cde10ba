"""Whether TE 1.x and a CUDA device are here, and TE 1.x's modules, imported without initialising CUDA.

Checked without importing TE (:func:`missing_reason`): the distribution's version from its
metadata (:mod:`harness.stacks.te_common.release`) and the devices through NVML, as for TE 2.x
(:mod:`harness.stacks.te.availability`).

Importing ``transformer_engine.pytorch`` 1.12 or 1.13 runs, at module level in ``attention.py``
when flash-attn is not installed, ``torch.cuda.is_available() and
get_device_compute_capability() >= (8, 0)``; the second asks ``torch.cuda.current_device()``,
which initialises CUDA, and a process that has initialised CUDA cannot fork a zygote whose
children use it. Both values only choose a debug message there. So :func:`te_modules` imports
TE with those two calls answered from NVML for the duration of the import (the device's compute
capability, :func:`harness.stacks.te_common.gpus.visible_gpus`) and with
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (``is_available`` through NVML); both are put back after it.
The ONNX stand-ins (:mod:`.onnx_standins`) are installed before the import, and TE's package
checks are answered from metadata rather than by ``pip`` in subprocesses (:mod:`.package_check`).

Names touched, read at tags v1.12 and v1.13 (the same in both): ``transformer_engine.pytorch``
(``Linear``, ``fp8_model_init(enabled)``, ``fp8_autocast(enabled, calibrating, fp8_recipe,
fp8_group, _graph)``), ``transformer_engine.common.recipe`` (``DelayedScaling``, ``Format``),
``transformer_engine.pytorch.fp8.FP8GlobalStateManager``,
``transformer_engine.pytorch.tensor.float8_tensor`` (``Float8Tensor``, ``_ToFloat8Func``,
``updated_fp8_params``; 1.12 also ``post_optimizer_step_fwd_amax_reduction``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import types

from harness.errors import SetupError
from harness.stacks.te_common import release
from harness.stacks.te1 import onnx_standins, package_check

SUT = "te1"


def missing_reason() -> str | None:
    """Why ``--sut te1`` cannot run here (one line), or None when it can."""
    if not release.found():
        return (f"--sut {SUT}: transformer_engine is not installed here (TE 1.12 or 1.13, on a machine with "
                f"a CUDA GPU; see README, 'How to run a TE release under the harness')")
    refusal = release.line_refusal(SUT, 1, "te", release.installed_version())
    if refusal is not None:
        return refusal
    import torch

    if not torch.backends.cuda.is_built() or torch.cuda.device_count() < 1:
        return f"--sut {SUT}: Transformer Engine needs a CUDA device, and torch sees none here"
    return None


def require() -> None:
    """Raise :class:`SetupError` (exit 2, one line) when TE 1.x or a CUDA device is missing."""
    reason = missing_reason()
    if reason is not None:
        raise SetupError(reason)


@contextlib.contextmanager
def cuda_left_alone(capability: tuple[int, int] | None):
    """For the duration: ``torch.cuda.current_device()`` answers 0 and
    ``torch.cuda.get_device_properties`` answers ``capability`` (major, minor) without starting
    CUDA, and ``is_available`` asks NVML. ``capability`` None (NVML could not tell): nothing is
    patched but the environment variable."""
    import torch

    saved_env = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    saved = (torch.cuda.current_device, torch.cuda.get_device_properties)
    if capability is not None and not torch.cuda.is_initialized():
        props = types.SimpleNamespace(major=capability[0], minor=capability[1])
        torch.cuda.current_device = lambda: 0
        torch.cuda.get_device_properties = lambda device=None: props
    try:
        yield
    finally:
        torch.cuda.current_device, torch.cuda.get_device_properties = saved
        if saved_env is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = saved_env


def _capability() -> tuple[int, int] | None:
    try:
        from harness.stacks.te_common.gpus import visible_gpus

        gpus = visible_gpus()
    except Exception:          # no NVML here (a CPU test's stand-in TE)
        return None
    return gpus[0].capability if gpus else None


def te_modules() -> types.SimpleNamespace:
    """TE 1.x's PyTorch API, recipe module, global state manager and FP8 tensor module, imported
    on first use with the ONNX stand-ins in place and CUDA left alone."""
    onnx_standins.install()
    package_check.install()
    try:
        with cuda_left_alone(_capability()):
            te = importlib.import_module("transformer_engine.pytorch")
            recipe = importlib.import_module("transformer_engine.common.recipe")
            fp8 = importlib.import_module("transformer_engine.pytorch.fp8")
            float8 = importlib.import_module("transformer_engine.pytorch.tensor.float8_tensor")
    except Exception as exc:     # installed but broken (built for another torch or CUDA)
        raise SetupError(f"--sut {SUT}: transformer_engine is installed but does not import: "
                         f"{type(exc).__name__}: {exc}") from None
    return types.SimpleNamespace(te=te, recipe=recipe, state_manager=fp8.FP8GlobalStateManager,
                                 float8=float8, Float8Tensor=float8.Float8Tensor,
                                 to_float8_func=float8._ToFloat8Func)
