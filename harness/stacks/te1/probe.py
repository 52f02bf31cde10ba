"""``python -m harness.stacks.te1.probe``: what the installed TE 1.x is, before any harness run.

Called by ``scripts/te1-validate`` (step ``probe``) on a GPU machine. Loads the ``--sut te1``
stack (the ONNX stand-ins, TE imported with CUDA left alone), says which release it is, which
stand-ins were installed and whether importing TE started CUDA anyway; then repeats, ``--cycles``
times, a build and destroy that shows whether TE's maps keep dead models' ids: ``te.Linear(64, 64)``
under ``te.fp8_model_init(enabled=True)``, a forward under ``te.fp8_autocast(enabled=True,
fp8_recipe=DelayedScaling())``, backward, an in-place high-precision copy into the FP8 weight,
the model deleted and collected; after each, the size of every TE 1.x registry
(:func:`harness.stacks.te1.global_state.sizes`). The JSON is rewritten after every cycle, so a
crash keeps what was gathered. Exit 2 with one line where TE 1.x or a GPU is missing.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys

from harness.errors import SetupError
from harness.files import write_atomic


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stacks.te1.probe")
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    try:
        from harness.stacks.te1.stack import load

        stack = load()
        mods = stack.te_mods()
    except SetupError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    import torch

    from harness.stacks.te_common.release import run_info
    from harness.stacks.te1 import global_state

    found = {**run_info(), "cuda_initialized_by_import": torch.cuda.is_initialized(),
             "release_line": stack.line.value, "cycles": []}
    write_atomic(args.json, json.dumps(found, indent=1))
    te, recipe = mods.te, mods.recipe
    for model in range(args.cycles):
        with te.fp8_model_init(enabled=True):
            layer = te.Linear(64, 64, device="cuda")
        x = torch.randn(16, 64, device="cuda", requires_grad=True)
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe.DelayedScaling()):
            out = layer(x)
        out.sum().backward()
        with torch.no_grad():
            layer.weight.copy_(torch.randn(64, 64, device="cuda"))
        torch.cuda.synchronize()
        del layer, x, out
        gc.collect()
        found["cycles"].append({"model": model + 1,
                                "sizes": global_state.sizes(mods.state_manager, mods.float8)})
        write_atomic(args.json, json.dumps(found, indent=1))
    print(json.dumps({k: v for k, v in found.items() if k != "cycles"}))
    for cycle in found["cycles"]:
        print(f"model {cycle['model']}: {cycle['sizes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
