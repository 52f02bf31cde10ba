"""TE 1.x's process-global FP8 state, named for the hygiene and retention oracles, and its reset.

Read at tags v1.12 and v1.13. ``FP8GlobalStateManager`` (``transformer_engine/pytorch/fp8.py``)
keeps its containers as class attributes, which ``reset()`` replaces:

* per buffer key, lists of every module's amax row, amax history, scale and scale_inv that ever
  ran under an autocast (``global_amax_buffer``, ``global_amax_history_buffer``,
  ``global_scale_buffer``, ``global_scale_inv_buffer``); v1.12 keys them
  ``forward|backward _ fp8_weights _ autocast key``, v1.13 without the middle part;
* ``autocast_arguments``: autocast key -> (recipe, group); ``fp8_tensors_recompute_buffer``;
* v1.12 only: ``autocast_to_fp8_params`` (autocast key -> set of ``id(weight._data)``) and
  ``fp8_param_to_autocast`` (``id(weight._data)`` -> autocast key), filled when a module with FP8
  weights first runs under an autocast and never pruned: the dead models' ids of TE PR #1326.

``transformer_engine/pytorch/tensor/float8_tensor.py`` holds ``updated_fp8_params`` (autocast
key -> ids re-cast since the key's last hook reduction) at module level, in both releases
(unused in v1.13); ``FP8GlobalStateManager.reset()`` does not clear it, :func:`reset` does.
"""

from __future__ import annotations

MANAGER_NAMES = ("global_amax_buffer", "global_amax_history_buffer", "global_scale_buffer",
                 "global_scale_inv_buffer", "autocast_arguments", "fp8_tensors_recompute_buffer",
                 "autocast_to_fp8_params", "fp8_param_to_autocast")
UPDATED_PARAMS = "updated_fp8_params"


def registries(state_manager, float8_module) -> dict:
    """TE 1.x's global FP8 containers by name (those this release has)."""
    regs = {f"FP8GlobalStateManager.{name}": getattr(state_manager, name)
            for name in MANAGER_NAMES if isinstance(getattr(state_manager, name, None), (dict, list))}
    updated = getattr(float8_module, UPDATED_PARAMS, None)
    if isinstance(updated, dict):
        regs[f"float8_tensor.{UPDATED_PARAMS}"] = updated
    return regs


def sizes(state_manager, float8_module) -> dict:
    """Entries per registry: a map's keys, or for the maps of sets and lists, their members too."""
    out = {}
    for name, reg in registries(state_manager, float8_module).items():
        if isinstance(reg, dict):
            members = sum(len(v) for v in reg.values() if isinstance(v, (set, list, dict)))
            out[name] = {"keys": len(reg), "members": members}
        else:
            out[name] = {"keys": len(reg), "members": 0}
    return out


def reset(state_manager, float8_module) -> None:
    """``FP8GlobalStateManager.reset()`` and the float8_tensor module's updated set."""
    state_manager.reset()
    updated = getattr(float8_module, UPDATED_PARAMS, None)
    if isinstance(updated, dict):
        updated.clear()
