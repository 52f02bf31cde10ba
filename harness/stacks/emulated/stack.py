"""The emulated stacks as :class:`harness.stacks.protocol.Stack` objects.

Construction path: the model-init context casts each freshly initialised weight with a dummy
amax (TE's operation-based Linear); with ``construction="copy"`` the harness's initial value
is then copied in from high precision, which records its amax, so ``w_0`` enters the weight
history at the first forward's autocast exit (how TE's tests set weights).
"""

from __future__ import annotations

import torch

from harness.stacks.emulated import id_bookkeeping
from harness.stacks.emulated.amax_buffers import GLOBAL_AMAX_BUFFERS, autocast_key
from harness.stacks.emulated.autocast import fp8_model_init
from harness.stacks.emulated.linear import Linear
from harness.stacks.emulated.model import Model, sgd_step
from harness.stacks.capabilities import Capabilities
from harness.stacks.protocol import BuildContext, ModelSpec, RoleState, StepOutputs


class EmulatedStack:
    # Every case the harness describes, in TE's delayed scaling (the only scaling emulated here).
    capabilities = Capabilities(scalings=("delayed",),
                                why={"scaling": "the emulated stacks implement TE's delayed scaling only"})

    # TE's global amax buffers and autocast arguments keep every (recipe, group) key ever seen and
    # the metas of dead models in it; the emulated ones model that (docs/design.md, "What the fix left").
    retained_on_purpose = {
        "amax_buffers.buffers": "models TE's global amax buffers, which keep dead models' metas",
        "amax_buffers.autocast_arguments": "models TE's autocast arguments, kept for every key ever seen",
    }
    # The process group it receives dies between cases (harness.runner.rank.group_death).
    renews_group = True

    def __init__(self, buggy: bool):
        self.buggy = buggy
        self.name = "emulated-buggy" if buggy else "emulated-patched"
        self.post_quantize_hooks = (id_bookkeeping.post_quantize_hook,) if buggy else ()

    # --- building ---------------------------------------------------------------------------
    def _registrar(self, recipe, group):
        akey = autocast_key(recipe, group)

        def register(layer: Linear) -> None:
            has_w = "w" if layer.fp8_weight else "nw"
            # Pre-fix TE kept modules with FP8 weights in buffers of their own, so the hook
            # could reduce them alone; the patched design needs no such split.
            fwd_key = ("fwd", has_w, akey) if self.buggy else ("fwd", akey)
            bwd_key = ("bwd", has_w, akey) if self.buggy else ("bwd", akey)
            GLOBAL_AMAX_BUFFERS.register(fwd_key, akey, recipe, group, layer.meta_fwd)
            GLOBAL_AMAX_BUFFERS.register(bwd_key, akey, recipe, group, layer.meta_bwd)
            if self.buggy and layer.fp8_weight:
                id_bookkeeping.register_weights(akey, [layer.weight])

        return register

    def build(self, spec: ModelSpec, ctx: BuildContext) -> Model:
        if spec.userbuffers:
            from harness.stacks.emulated.tp_model import build_tp_model
            return build_tp_model(self, spec, ctx)
        group = ctx.group if ctx.world_size > 1 else None
        register = self._registrar(spec.recipe, group)
        with fp8_model_init(enabled=spec.fp8_params):
            layers = [Linear(w, spec.recipe, register, self.post_quantize_hooks) for w in ctx.initial_weights]
        model = Model(layers, spec.recipe, group, spec.lr, spec.data_parallel)
        if spec.fp8_params and spec.construction == "copy":
            with torch.no_grad():
                for layer, w in zip(layers, ctx.initial_weights):
                    layer.weight.quantize_(w)
            model.master = [w.clone() for w in ctx.initial_weights]
        elif spec.fp8_params:
            model.master = [w.clone() for w in ctx.initial_weights]
        else:
            model.master = [layer.weight for layer in layers]
        return model

    # --- a step -----------------------------------------------------------------------------
    def forward_backward(self, model: Model, inputs: torch.Tensor, grad_output: torch.Tensor) -> StepOutputs:
        return model.forward_backward(inputs, grad_output)

    def snapshot(self, model: Model) -> dict[str, RoleState]:
        out = {}
        for i, layer in enumerate(model.layers):
            for meta, role in ((layer.meta_fwd, "input"), (layer.meta_fwd, "weight"), (layer.meta_bwd, "grad_output")):
                s = meta.slot(role)
                data, sinv = layer.last_casts[role]
                out[f"layer{i}.{role}"] = RoleState(meta.amax_history[:, s].clone(), meta.scale[s].clone(),
                                                   meta.scale_inv[s].clone(), data.clone(), sinv.clone())
        return out

    def optimizer_step(self, model: Model) -> None:
        sgd_step(model, model.master)

    def final_weights(self, model: Model) -> dict[str, RoleState]:
        out = {}
        for i, layer in enumerate(model.layers):
            meta, s = layer.meta_fwd, layer.meta_fwd.slot("weight")
            if layer.fp8_weight:
                out[f"layer{i}.weight"] = RoleState(meta.amax_history[:, s].clone(), meta.scale[s].clone(),
                                                   meta.scale_inv[s].clone(), layer.weight._data.clone(),
                                                   layer.weight._scale_inv.clone())
            else:
                out[f"layer{i}.weight"] = RoleState(torch.zeros(0), torch.ones(()), torch.ones(()),
                                                   layer.weight.clone(), None)
        return out

    # --- lifetime and registries ----------------------------------------------------------
    def reuse_targets(self, model: Model) -> list:
        return [layer.weight._data for layer in model.layers if layer.fp8_weight]

    def model_objects(self, model: Model) -> list:
        return [model, *model.layers, *(layer.weight for layer in model.layers if layer.fp8_weight)]

    def destroy(self, model: Model) -> None:
        destroy = getattr(model, "destroy", None)
        if destroy is not None:
            destroy()

    def registries(self) -> dict:
        regs = {
            "amax_buffers.buffers": GLOBAL_AMAX_BUFFERS.buffers,
            "amax_buffers.autocast_arguments": GLOBAL_AMAX_BUFFERS.autocast_arguments,
        }
        if self.buggy:
            regs.update({
                "id_bookkeeping.AUTOCAST_TO_FP8_PARAMS": id_bookkeeping.AUTOCAST_TO_FP8_PARAMS,
                "id_bookkeeping.FP8_PARAM_TO_AUTOCAST": id_bookkeeping.FP8_PARAM_TO_AUTOCAST,
                "id_bookkeeping.UPDATED_FP8_PARAMS": id_bookkeeping.UPDATED_FP8_PARAMS,
            })
        return regs

    def reset(self) -> None:
        from harness.stacks.emulated import userbuffers

        userbuffers.destroy()
        GLOBAL_AMAX_BUFFERS.reset()
        if self.buggy:
            id_bookkeeping.reset()


PATCHED = EmulatedStack(buggy=False)
BUGGY = EmulatedStack(buggy=True)
