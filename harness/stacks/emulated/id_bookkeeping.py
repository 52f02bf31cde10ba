"""The pre-fix id bookkeeping and post-cast hook (TE before PR #1326), in the buggy stack only.

Two process-global maps, keyed by ``id(weight._data)``, filled when a module with FP8 weights
first runs inside an autocast and never pruned:

* ``AUTOCAST_TO_FP8_PARAMS``: autocast key -> set of weight ids registered under it;
* ``FP8_PARAM_TO_AUTOCAST``: weight id -> autocast key.

After every high-precision -> FP8 in-place cast of any FP8 parameter, the hook adds the
parameter's id to an "updated" set for its key; once that set equals the registered set, it
runs a forward amax reduction and update of the weight buffers. A dead model's ids stay in
both maps; when a new tensor takes such an id, its casts complete a stale set and the
reduction fires at a moment nobody planned, on the ranks where the address came back.
"""

from __future__ import annotations

from harness.stacks.emulated.amax_buffers import GLOBAL_AMAX_BUFFERS

AUTOCAST_TO_FP8_PARAMS: dict[tuple, set] = {}
FP8_PARAM_TO_AUTOCAST: dict[int, tuple] = {}
UPDATED_FP8_PARAMS: dict[tuple, set] = {}


def register_weights(akey: tuple, weights) -> None:
    """At a module's first forward under autocast: remember its weights' ids under the key."""
    ids = {id(w._data) for w in weights}
    AUTOCAST_TO_FP8_PARAMS[akey] = AUTOCAST_TO_FP8_PARAMS.get(akey, set()) | ids
    for w in weights:
        FP8_PARAM_TO_AUTOCAST[id(w._data)] = akey


def post_quantize_hook(param) -> None:
    """Fire the weight-buffer reduction once every registered weight of a key was re-cast."""
    param_id = id(param._data)
    akey = FP8_PARAM_TO_AUTOCAST.get(param_id)
    if akey is None or akey not in AUTOCAST_TO_FP8_PARAMS:
        return
    UPDATED_FP8_PARAMS.setdefault(akey, set()).add(param_id)
    if UPDATED_FP8_PARAMS[akey] == AUTOCAST_TO_FP8_PARAMS[akey]:
        # Pre-fix TE reduced every forward buffer of modules with FP8 weights, whatever its key.
        GLOBAL_AMAX_BUFFERS.reduce_and_update(forward=True, select=lambda key: key[1] == "w")
        del UPDATED_FP8_PARAMS[akey]


def reset() -> None:
    AUTOCAST_TO_FP8_PARAMS.clear()
    FP8_PARAM_TO_AUTOCAST.clear()
    UPDATED_FP8_PARAMS.clear()
