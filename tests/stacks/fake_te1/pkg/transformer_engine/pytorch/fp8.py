"""CPU stand-in of transformer_engine.pytorch.fp8 (TE 1.x): FP8GlobalStateManager, fp8_autocast, fp8_model_init.

Which release it plays comes from the installed distribution's version (1.12: the id-keyed maps
and the weight-key split of the buffers; 1.13: neither). ``FAULTS`` plants known-bad behaviour.
"""

import contextlib
import importlib.metadata

import torch

from harness.fp8.recipe import AmaxComputeAlgo, DelayedScalingRecipe
from harness.fp8.recipe import Format as HarnessFormat
from harness.fp8.scaling import delayed_scaling_update_rows
from transformer_engine.common.recipe import DelayedScaling

VERSION = importlib.metadata.version("transformer-engine")
HOOK = VERSION.startswith("1.12")

# known-bad behaviour, for tests: "hook_everywhere" -- every quantize_ ends with a forward
# reduction (as PR #575's hook, but unconditional); "skewed_exit_scale" -- the autocast exit's
# update writes a scale one ulp off
FAULTS = {"hook_everywhere": False, "skewed_exit_scale": False}


def get_default_fp8_recipe():
    return DelayedScaling()


def harness_recipe(recipe) -> DelayedScalingRecipe:
    return DelayedScalingRecipe(HarnessFormat(recipe.fp8_format.name), recipe.margin, recipe.amax_history_len,
                                AmaxComputeAlgo(recipe.amax_compute_algo), recipe.reduce_amax)


class FP8GlobalStateManager:
    FP8_ENABLED = False
    FP8_RECIPE = None
    FP8_DISTRIBUTED_GROUP = None
    FP8_PARAMETERS = False
    IS_FIRST_FP8_MODULE = False
    FP8_AUTOCAST_DEPTH = 0
    global_amax_buffer = {}
    global_amax_history_buffer = {}
    global_scale_buffer = {}
    global_scale_inv_buffer = {}
    fp8_tensors_recompute_buffer = []
    autocast_arguments = {}
    if HOOK:
        autocast_to_fp8_params = {}
        fp8_param_to_autocast = {}

    @classmethod
    def reset(cls):
        cls.FP8_ENABLED = False
        cls.FP8_RECIPE = None
        cls.FP8_DISTRIBUTED_GROUP = None
        cls.FP8_PARAMETERS = False
        cls.IS_FIRST_FP8_MODULE = False
        cls.FP8_AUTOCAST_DEPTH = 0
        cls.global_amax_buffer = {}
        cls.global_amax_history_buffer = {}
        cls.global_scale_buffer = {}
        cls.global_scale_inv_buffer = {}
        cls.fp8_tensors_recompute_buffer = []
        cls.autocast_arguments = {}
        if HOOK:
            cls.autocast_to_fp8_params = {}
            cls.fp8_param_to_autocast = {}

    @classmethod
    def get_unique_autocast_key(cls, recipe=None, group=None):
        return f"{str(recipe)}:{hash(group)}"

    @classmethod
    def with_fp8_parameters(cls):
        return cls.FP8_PARAMETERS

    @classmethod
    def add_fp8_tensors_to_global_buffer(cls, module, fp8_weights=None):
        """Once per module: its metas into the buffers (1.12: its weights' ids into the maps)."""
        if module.registered:
            return
        module.registered = True
        autocast_key = cls.get_unique_autocast_key(module.fp8_meta["recipe"], module.fp8_meta["fp8_group"])
        for forward in (True, False):
            if HOOK and forward and fp8_weights is not None:
                ids = {id(w._data) for w in fp8_weights}
                cls.autocast_to_fp8_params[autocast_key] = cls.autocast_to_fp8_params.get(autocast_key, set()) | ids
                for i in ids:
                    cls.fp8_param_to_autocast[i] = autocast_key
            direction = "forward" if forward else "backward"
            key = f"{direction}_{fp8_weights is not None}_{autocast_key}" if HOOK else f"{direction}_{autocast_key}"
            meta = module.fp8_meta["scaling_fwd" if forward else "scaling_bwd"]
            cls.global_amax_buffer.setdefault(key, []).append(meta.amax_history[0])
            cls.global_amax_history_buffer.setdefault(key, []).append(meta)
            cls.global_scale_buffer.setdefault(key, []).append(meta)
            cls.global_scale_inv_buffer.setdefault(key, []).append(meta)

    @staticmethod
    def reduce_tensor_across_group_op_max(tensor, group):
        """In place, as TE's: MAX over the group."""
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX, group=group)

    @classmethod
    def reduce_and_update_fp8_tensors(cls, forward=True, fp8_weights=False):
        """As TE's: per buffer key, the rows concatenated, MAX-reduced over the autocast's group
        (more than one rank), then each meta updated from its share of the reduced rows."""
        for key, amax_buffer in cls.global_amax_buffer.items():
            parts = key.split("_", 2) if HOOK else key.split("_", 1)
            if (parts[0] == "forward") != forward:
                continue
            if HOOK and forward and fp8_weights and parts[1] != "True":
                continue
            recipe, group = cls.autocast_arguments[parts[-1]]
            contiguous_amax = torch.cat(amax_buffer)
            if (recipe.reduce_amax and torch.distributed.is_initialized()
                    and torch.distributed.get_world_size(group=group) > 1):
                cls.reduce_tensor_across_group_op_max(contiguous_amax, group)
            harness = harness_recipe(recipe)
            fmt = harness.fp8_format.forward() if forward else harness.fp8_format.backward()
            offset = 0
            for meta in cls.global_amax_history_buffer[key]:
                history = meta.amax_history.t()           # [slots, L]
                slots = history.shape[0]
                reduced = contiguous_amax[offset:offset + slots].clone()
                offset += slots
                new_history, scale, scale_inv = delayed_scaling_update_rows(
                    history, meta.scale, reduced, harness, fmt)
                if FAULTS["skewed_exit_scale"] and forward and not fp8_weights:
                    scale = torch.nextafter(scale, torch.full_like(scale, float("inf")))
                meta.amax_history.copy_(new_history.t())
                meta.scale.copy_(scale)
                meta.scale_inv.copy_(scale_inv)

    @classmethod
    def fp8_autocast_enter(cls, enabled=False, fp8_recipe=None, fp8_group=None):
        fp8_recipe = get_default_fp8_recipe() if fp8_recipe is None else fp8_recipe
        cls.autocast_arguments[cls.get_unique_autocast_key(fp8_recipe, fp8_group)] = (fp8_recipe, fp8_group)
        cls.FP8_ENABLED, cls.FP8_RECIPE, cls.FP8_DISTRIBUTED_GROUP = enabled, fp8_recipe, fp8_group
        if cls.FP8_AUTOCAST_DEPTH == 0:
            cls.IS_FIRST_FP8_MODULE = True
        cls.FP8_AUTOCAST_DEPTH += 1

    @classmethod
    def fp8_autocast_exit(cls, enabled, _graph):
        cls.FP8_AUTOCAST_DEPTH -= 1
        if enabled and cls.FP8_AUTOCAST_DEPTH == 0 and torch.is_grad_enabled():
            if HOOK:
                cls.reduce_and_update_fp8_tensors(forward=True, fp8_weights=False)
            else:
                cls.reduce_and_update_fp8_tensors(forward=True)


@contextlib.contextmanager
def fp8_autocast(enabled=True, calibrating=False, fp8_recipe=None, fp8_group=None, _graph=False):
    state = (FP8GlobalStateManager.FP8_ENABLED, FP8GlobalStateManager.FP8_RECIPE,
             FP8GlobalStateManager.FP8_DISTRIBUTED_GROUP)
    try:
        FP8GlobalStateManager.fp8_autocast_enter(enabled, fp8_recipe, fp8_group)
        yield
    finally:
        (FP8GlobalStateManager.FP8_ENABLED, FP8GlobalStateManager.FP8_RECIPE,
         FP8GlobalStateManager.FP8_DISTRIBUTED_GROUP) = state
        FP8GlobalStateManager.fp8_autocast_exit(enabled, _graph=_graph)


@contextlib.contextmanager
def fp8_model_init(enabled=True):
    saved = FP8GlobalStateManager.FP8_PARAMETERS
    FP8GlobalStateManager.FP8_PARAMETERS = enabled
    try:
        yield
    finally:
        FP8GlobalStateManager.FP8_PARAMETERS = saved
