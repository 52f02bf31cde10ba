"""The autocast and model-init contexts (TE's ``fp8_autocast`` and ``fp8_model_init``).

The autocast state is process-global, as in TE. At the outermost autocast exit every forward
buffer is reduced and updated; the backward reduction runs after backward (the model calls
:func:`reduce_backward`).
"""

from __future__ import annotations

import contextlib
import dataclasses

from harness.stacks.emulated.amax_buffers import GLOBAL_AMAX_BUFFERS


@dataclasses.dataclass
class _AutocastState:
    depth: int = 0
    recipe: object = None
    group: object = None


AUTOCAST = _AutocastState()
_MODEL_INIT = {"fp8_params": False}


@contextlib.contextmanager
def fp8_autocast(recipe, group):
    saved = (AUTOCAST.recipe, AUTOCAST.group)
    AUTOCAST.depth += 1
    AUTOCAST.recipe, AUTOCAST.group = recipe, group
    try:
        yield
    finally:
        AUTOCAST.depth -= 1
        AUTOCAST.recipe, AUTOCAST.group = saved
    if AUTOCAST.depth == 0:
        GLOBAL_AMAX_BUFFERS.reduce_and_update(forward=True)


def reduce_backward() -> None:
    GLOBAL_AMAX_BUFFERS.reduce_and_update(forward=False)


@contextlib.contextmanager
def fp8_model_init(enabled: bool = True):
    saved = _MODEL_INIT["fp8_params"]
    _MODEL_INIT["fp8_params"] = enabled
    try:
        yield
    finally:
        _MODEL_INIT["fp8_params"] = saved


def fp8_params_requested() -> bool:
    return _MODEL_INIT["fp8_params"]
