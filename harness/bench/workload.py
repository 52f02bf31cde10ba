"""What the benchmarks run: the bench's case specs, and the model work of one case without the harness.

:func:`small_cases` are the cases the launch figures use (one tiny model, two steps each: the
launch, not the model, should dominate a fresh group). :func:`cycle_cases` are the stress-like
cases the throughput and memory figures use (many build / step / destroy cycles per case).

:func:`model_work` is exactly the stack work :func:`harness.runner.rank.execute.execute_case`
drives for a case, in the same order, with the same seeded data, and nothing else: no
reference, no snapshot, no hygiene scan, no ledger, no precheck, no collection. The bare loop
(:mod:`harness.bench.bare_worker`) runs it, so a ratio of harness time to bare time isolates
what the harness adds; the stack's own costs (its never-pruned amax buffers included) are on
both sides.
"""

from __future__ import annotations

from harness.case.data import initial_weights, step_grad_output, step_inputs
from harness.case.spec import CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe
from harness.stacks.protocol import BuildContext, ModelSpec


def _recipe(hist: int = 16) -> DelayedScalingRecipe:
    return DelayedScalingRecipe(fp8_format="HYBRID", margin=0, amax_history_len=hist, amax_compute_algo="max",
                                reduce_amax=True)


SMALL_DIMS, SMALL_BATCH = (16, 32, 16), 8


def small_cases(count: int = 40, dims: tuple = SMALL_DIMS, batch: int = SMALL_BATCH) -> list[CaseSpec]:
    """``count`` small cases: one model of 2 FP8 Linear layers, 2 steps, distinct seeded data.
    ``dims`` and ``batch`` widen the model (the bench's figures keep the defaults)."""
    model = ModelSpec(dims=tuple(dims), recipe=_recipe())
    return [CaseSpec(name=f"bench/small-{i:03d}", model=model, batch=batch, steps=2, models=1, data_seed=i)
            for i in range(count)]


def cycle_cases(count: int, models: int, steps: int = 1) -> list[CaseSpec]:
    """``count`` cases of ``models`` build / ``steps`` step / destroy cycles each (stress-like)."""
    model = ModelSpec(dims=(16, 32, 16), recipe=_recipe())
    return [CaseSpec(name=f"bench/cycles-{i:03d}", model=model, batch=8, steps=steps, models=models, data_seed=i)
            for i in range(count)]


def model_work(case: CaseSpec, stack, rank: int, world_size: int, group, run_seed: int = 0, on_cycle=None) -> int:
    """Build, train and destroy every model of ``case`` on this rank; returns the cycles run.

    ``on_cycle(model_index)`` is called after each model was destroyed (the memory figure
    samples RSS there).
    """
    import torch

    from harness.runner.config import field_default

    deadline_s = field_default("deadline_s")     # what a run's BuildContext carries by default
    for m in range(case.models):
        ctx = BuildContext(rank=rank, world_size=world_size, group=group, device=torch.device("cpu"),
                           initial_weights=initial_weights(case, m, run_seed), deadline_s=deadline_s)
        model = stack.build(case.model, ctx)
        for t in range(case.steps):
            x = step_inputs(case, m, t, rank, run_seed)
            dy = step_grad_output(case, m, t, rank, run_seed)
            stack.forward_backward(model, x, dy)
            stack.optimizer_step(model)
        stack.destroy(model)
        del model, ctx
        if on_cycle is not None:
            on_cycle(m)
    return case.models
