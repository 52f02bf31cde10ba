"""``--inject id-hook``: TE's pre-fix id bookkeeping, grafted onto torchao.

The hook, and how a dead id makes it fire: docs/design.md, "The bug".

torchao keeps no id()-keyed state; this module adds some on purpose, so that the harness's
oracles can be shown to catch the bug class on a real stack. Nothing here runs unless the
stack is loaded with ``inject="id-hook"``.

Process-global state, keyed by ``key = (config summary, group ranks)``, never pruned (only
:func:`reset` clears it):

* ``REGISTERED_WEIGHTS``: key -> set of ``id(weight)``, filled at each ``Float8Linear``'s first
  forward;
* ``WEIGHT_TO_KEY``: ``id(weight)`` -> key;
* ``UPDATED_WEIGHTS``: key -> ids whose weight was written since the last reduction;
* ``WEIGHT_AMAXES``: key -> list of one 1-element amax tensor per layer ever registered (TE's
  amax buffers: a dead layer's tensor stays, and is reduced with the living ones);
* ``REDUCED_WEIGHT_AMAXES``: key -> the result of the last reduction;
* ``KEY_GROUPS``: key -> the process group to reduce over (``None`` on one rank).

The hook (:func:`after_weight_update`) runs after every in-place write of a weight (the
optimizer's update, and the copy of the initial value at build): it looks the weight's id up,
adds it to the key's updated set and, once that set equals the registered set, all-reduces
(MAX, over the group) the amaxes of *every* registered layer of the key. The result goes to
``REDUCED_WEIGHT_AMAXES`` and nowhere else: torchao's numerics do not change; what the bug adds
is a collective nobody planned.

Why it breaks: a dead model's ids stay registered. A rank where a new weight takes a dead
weight's id (CPython's ``id()`` is an address) completes the stale set and reduces; a rank
where it does not has a registered set that can never complete again, and never reduces. The
ranks' collective sequences part, on the first weight write of the next model.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

REGISTERED_WEIGHTS: dict[tuple, set] = {}
WEIGHT_TO_KEY: dict[int, tuple] = {}
UPDATED_WEIGHTS: dict[tuple, set] = {}
WEIGHT_AMAXES: dict[tuple, list] = {}
REDUCED_WEIGHT_AMAXES: dict[tuple, torch.Tensor] = {}
KEY_GROUPS: dict[tuple, object] = {}

_AMAX_ATTR = "id_hook_weight_amax"     # the layer's entry in WEIGHT_AMAXES, kept on the layer too
_REGISTERED_ATTR = "id_hook_registered"


def bookkeeping_key(config_summary: tuple, group) -> tuple:
    """(config summary, group ranks), like TE's autocast key (recipe, fp8 group)."""
    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else (0,)
    return (config_summary, ranks)


def attach(module, key: tuple, group) -> None:
    """At build: give the layer its weight-amax slot, and a forward pre-hook that registers the
    layer's weight at its first forward (TE registered at a module's first forward in autocast)."""
    setattr(module, _AMAX_ATTR, torch.zeros(1))

    def register(mod, args) -> None:
        if getattr(mod, _REGISTERED_ATTR, False):
            return
        weight = mod.weight
        REGISTERED_WEIGHTS[key] = REGISTERED_WEIGHTS.get(key, set()) | {id(weight)}
        WEIGHT_TO_KEY[id(weight)] = key
        KEY_GROUPS[key] = group
        amax = getattr(mod, _AMAX_ATTR)
        amax.copy_(torch.max(torch.abs(weight.detach())).reshape(1))
        WEIGHT_AMAXES.setdefault(key, []).append(amax)
        setattr(mod, _REGISTERED_ATTR, True)

    module.register_forward_pre_hook(register)


def after_weight_update(module, weight: torch.Tensor) -> None:
    """After an in-place high-precision write of ``weight``: record its amax, maybe reduce."""
    amax = getattr(module, _AMAX_ATTR, None)
    if amax is not None:
        amax.copy_(torch.max(torch.abs(weight.detach())).reshape(1))
    weight_id = id(weight)
    key = WEIGHT_TO_KEY.get(weight_id)
    if key is None or key not in REGISTERED_WEIGHTS:
        return
    UPDATED_WEIGHTS.setdefault(key, set()).add(weight_id)
    if UPDATED_WEIGHTS[key] == REGISTERED_WEIGHTS[key]:
        reduce_weight_amaxes(key)
        del UPDATED_WEIGHTS[key]


def reduce_weight_amaxes(key: tuple) -> None:
    """MAX-all-reduce the amaxes of every layer ever registered under ``key``."""
    amaxes = torch.cat(WEIGHT_AMAXES[key]) if WEIGHT_AMAXES.get(key) else torch.zeros(0)
    group = KEY_GROUPS.get(key)
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(amaxes, op=dist.ReduceOp.MAX, group=group)
    REDUCED_WEIGHT_AMAXES[key] = amaxes


def registries() -> dict:
    return {
        "id_hook.REGISTERED_WEIGHTS": REGISTERED_WEIGHTS,
        "id_hook.WEIGHT_TO_KEY": WEIGHT_TO_KEY,
        "id_hook.UPDATED_WEIGHTS": UPDATED_WEIGHTS,
        "id_hook.WEIGHT_AMAXES": WEIGHT_AMAXES,
        "id_hook.REDUCED_WEIGHT_AMAXES": REDUCED_WEIGHT_AMAXES,
        "id_hook.KEY_GROUPS": KEY_GROUPS,
    }


def reset() -> None:
    for registry in (REGISTERED_WEIGHTS, WEIGHT_TO_KEY, UPDATED_WEIGHTS, WEIGHT_AMAXES, REDUCED_WEIGHT_AMAXES,
                     KEY_GROUPS):
        registry.clear()
