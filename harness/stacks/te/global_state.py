"""TE's process-global FP8 state, named for the hygiene and retention oracles, and its reset.

``FP8GlobalStateManager`` keeps, per buffer key ``forward|backward`` x (recipe, fp8 group),
lists of every module's amax row, amax history and scale that ever ran under an autocast
(``global_amax_buffer``, ``global_amax_history_buffer``, ``global_scale_buffer``), and the
(recipe, group) of every autocast key (``autocast_arguments``). Nothing removes a dead
module's entries; only ``reset()`` does. TE 2.x holds them on a state object that ``reset()``
replaces, older 2.x releases on the class itself: the names are read from whichever is there,
at every call.
"""

from __future__ import annotations

BUFFER_NAMES = ("global_amax_buffer", "global_amax_history_buffer", "global_scale_buffer",
                "global_scale_inv_buffer", "global_non_weight_mask_buffer", "autocast_arguments",
                "fp8_tensors_recompute_buffer")


def _holder(state_manager):
    return getattr(state_manager, "quantization_state", state_manager)


def registries(state_manager) -> dict:
    """TE's global FP8 containers by name (``FP8GlobalStateManager.<name>``)."""
    holder = _holder(state_manager)
    return {f"FP8GlobalStateManager.{name}": getattr(holder, name)
            for name in BUFFER_NAMES if isinstance(getattr(holder, name, None), (dict, list))}


def amax_entries(state_manager, forward: bool = True) -> int:
    """How many modules' amax rows the forward (or backward) buffers hold, over every key."""
    prefix = "forward" if forward else "backward"
    buffers = getattr(_holder(state_manager), "global_amax_buffer", {})
    return sum(len(rows) for key, rows in buffers.items() if key.startswith(prefix))


def reset(state_manager) -> None:
    state_manager.reset()
