"""A long build-and-destroy loop on TE: what dead models leave behind, and what it costs.

``python -m harness.stacks.te.retention_loop --models N --json PATH`` (one process), or under
``torchrun --nproc-per-node 2`` (one GPU per rank, gloo beside NCCL as in the harness). Each
model: build, one step (forward and backward under autocast, optimizer step), destroy, collect.
TE never prunes its global amax buffers (docs/design.md, "The bug"), so each model leaves its
meta tensors there and every later autocast exit reduces and updates them again. After each model,
measured here:

* ``cuda_allocated_bytes``: ``torch.cuda.memory_allocated()`` after the model died;
* ``forward_rows``: how many modules' amax rows TE's forward buffers hold;
* ``exit_reduction_s``: the time of one forward reduction and update over those buffers (what
  every autocast exit pays), the median of 5, synchronised; only dead models' rows are in
  the buffers at that moment, so the extra reductions change nothing alive.

The report keeps the first and last model and every model in between at a tenth of the run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch

from harness.case.data import initial_weights, step_grad_output, step_inputs
from harness.files import write_atomic
from harness.stacks.protocol import BuildContext
from harness.stacks.te import cases as te_cases
from harness.stacks.te import global_state
from harness.stacks.te.stack import load


def _group():
    """(rank, world size, gloo group or None), from torchrun's environment when it is set."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, None
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return dist.get_rank(), world, dist.group.WORLD


def exit_reduction_seconds(state_manager, repeats: int = 5) -> float:
    """Median time of one forward reduction and update over every buffer TE holds."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        state_manager.reduce_and_update_fp8_tensors(forward=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def one_model(stack, case, index: int, rank: int, world: int, group) -> None:
    weights = initial_weights(case, index, 0)
    ctx = BuildContext(rank=rank, world_size=world, group=group, device=torch.device("cpu"),
                       initial_weights=weights,
                       deadline_s=60.0)   # TE's layers here wait on nothing of the harness's
    model = stack.build(case.model, ctx)
    stack.forward_backward(model, step_inputs(case, index, 0, rank, 0), step_grad_output(case, index, 0, rank, 0))
    stack.optimizer_step(model)
    stack.destroy(model)
    del model
    gc.collect()


def measure(stack, index: int) -> dict:
    state_manager = stack.te_mods().state_manager
    return {"model": index + 1, "cuda_allocated_bytes": torch.cuda.memory_allocated(),
            "forward_rows": global_state.amax_entries(state_manager, forward=True),
            "exit_reduction_s": exit_reduction_seconds(state_manager)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stacks.te.retention_loop")
    parser.add_argument("--models", type=int, default=1000, help="models to build and destroy (default 1000)")
    parser.add_argument("--case", default="delayed/te-default", help="the TE catalogue case whose model is built")
    parser.add_argument("--json", default=None, help="write the measurements here (rank 0)")
    args = parser.parse_args(argv)
    if args.models < 1:
        print("--models must be >= 1", file=sys.stderr)
        return 2
    by_name = {c.name: c for c in te_cases.builtin_cases()}
    if args.case not in by_name:
        print(f"--case {args.case!r} is not in the TE catalogue", file=sys.stderr)
        return 2
    case = by_name[args.case]
    stack = load()
    rank, world, group = _group()
    every = max(1, args.models // 10)
    rows = []
    started = time.perf_counter()
    for index in range(args.models):
        one_model(stack, case, index, rank, world, group)
        if index == 0 or index == args.models - 1 or (index + 1) % every == 0:
            rows.append(measure(stack, index))
            if rank == 0:
                print(json.dumps(rows[-1]), flush=True)
    report = {"case": case.name, "dims": list(case.model.dims), "world_size": world, "models": args.models,
              "wall_s": time.perf_counter() - started, "rows": rows}
    if rank == 0 and args.json:
        write_atomic(args.json, json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
