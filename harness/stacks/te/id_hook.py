"""``--sut te-buggy``: TE's pre-fix id bookkeeping and post-cast hook, put back into TE on purpose.

Before TE PR #1326 (docs/design.md, "The bug"), TE tracked FP8 parameters by ``id(param._data)``.
This module restores that logic around TE 2.x, written from that description, so the harness's
oracles can be shown to catch the bug on the real stack. Nothing here runs unless the stack is
loaded as ``te-buggy`` (or ``--sut te --inject id-hook``).

Process-global state, keyed by TE's autocast key (recipe text and fp8 group), never pruned
(only :func:`reset` clears it):

* ``REGISTERED_FP8_PARAMS``: autocast key -> ids of the FP8 weights registered under it, each
  at its module's first forward inside an autocast;
* ``FP8_PARAM_TO_AUTOCAST``: weight id -> autocast key;
* ``UPDATED_FP8_PARAMS``: autocast key -> ids re-cast since the key's last reduction.

The hook runs after every high-precision -> FP8 in-place cast of any FP8 tensor (TE's
``Float8Quantizer.update_quantized``, which ``quantize_`` and ``copy_`` from high precision
go through; an FP8 -> FP8 copy does not): it looks up ``id(tensor._data)``, adds it to the
key's updated set and, once that set equals the registered set, runs TE's forward amax
reduction and update (``FP8GlobalStateManager.reduce_and_update_fp8_tensors(forward=True)``)
and clears the set. Whatever else the forward buffers hold has an amax of 0 at that moment
(an autocast exit reduced it last), and a zero amax changes no history: only the weights move,
as in pre-fix TE, where the reduction covered weight buffers only.

Why it breaks: a dead model's ids stay registered. Where a new weight's ``_data`` takes a dead
one's address, its construction copy and optimizer casts complete a stale set and the
reduction fires at a moment nobody planned, on the ranks where the address came back.
"""

from __future__ import annotations

import functools

REGISTERED_FP8_PARAMS: dict[str, set] = {}
FP8_PARAM_TO_AUTOCAST: dict[int, str] = {}
UPDATED_FP8_PARAMS: dict[str, set] = {}

_ORIGINAL = {}                 # the unpatched update_quantized, while the hook is installed
_REGISTERED_ATTR = "_harness_id_hook_registered"


def install(te_mods) -> None:
    """Wrap TE's in-place FP8 cast so that :func:`after_cast` runs after each one (idempotent)."""
    quantizer_cls = te_mods.Float8Quantizer
    if "update_quantized" in _ORIGINAL:
        return
    original = quantizer_cls.update_quantized
    state_manager = te_mods.state_manager

    @functools.wraps(original)
    def update_quantized(self, src, dst, *args, **kwargs):
        out = original(self, src, dst, *args, **kwargs)
        after_cast(dst, state_manager)
        return out

    _ORIGINAL["update_quantized"] = (quantizer_cls, original)
    quantizer_cls.update_quantized = update_quantized


def uninstall() -> None:
    """Put TE's own cast back (tests that load both stacks in one process)."""
    entry = _ORIGINAL.pop("update_quantized", None)
    if entry is not None:
        quantizer_cls, original = entry
        quantizer_cls.update_quantized = original


def attach(layer, state_manager, weight=None) -> None:
    """Register the layer's FP8 weight at the layer's first forward inside an FP8 autocast.

    ``weight()`` gives the weight when it is not ``layer.weight`` (a ``te.ops.Sequential``,
    whose forward is the one a hook sees, holds it in its ``BasicLinear``).
    """

    def register(module, args) -> None:
        if getattr(module, _REGISTERED_ATTR, False) or not state_manager.is_fp8_enabled():
            return
        data = getattr(weight() if weight is not None else module.weight, "_data", None)
        if data is None:          # a high-precision weight: pre-fix TE registered FP8 weights only
            return
        key = state_manager.get_unique_autocast_key(state_manager.get_fp8_recipe(), state_manager.get_fp8_group())
        weight_id = id(data)
        REGISTERED_FP8_PARAMS.setdefault(key, set()).add(weight_id)
        FP8_PARAM_TO_AUTOCAST[weight_id] = key
        setattr(module, _REGISTERED_ATTR, True)

    layer.register_forward_pre_hook(register)


def after_cast(tensor, state_manager) -> None:
    """Fire the forward amax reduction once every registered weight of a key was re-cast."""
    data = getattr(tensor, "_data", None)
    if data is None:
        return
    tensor_id = id(data)
    key = FP8_PARAM_TO_AUTOCAST.get(tensor_id)
    if key is None or key not in REGISTERED_FP8_PARAMS:
        return
    UPDATED_FP8_PARAMS.setdefault(key, set()).add(tensor_id)
    if UPDATED_FP8_PARAMS[key] == REGISTERED_FP8_PARAMS[key]:
        state_manager.reduce_and_update_fp8_tensors(forward=True)
        del UPDATED_FP8_PARAMS[key]


def registries() -> dict:
    return {
        "id_hook.REGISTERED_FP8_PARAMS": REGISTERED_FP8_PARAMS,
        "id_hook.FP8_PARAM_TO_AUTOCAST": FP8_PARAM_TO_AUTOCAST,
        "id_hook.UPDATED_FP8_PARAMS": UPDATED_FP8_PARAMS,
    }


def reset() -> None:
    for registry in (REGISTERED_FP8_PARAMS, FP8_PARAM_TO_AUTOCAST, UPDATED_FP8_PARAMS):
        registry.clear()
