"""One rank of the bare loop: the cases' model work on gloo, with none of the harness around it.

Started by :class:`harness.bench.bare.BareGroup` as ``python -m harness.bench.bare_worker``.
It imports the stack and the seeded data, never the runner: no ledger wraps the collectives,
no precheck, no reference, no hygiene scan, no forced collection. It freezes the objects alive
after imports (``gc.freeze``) as the harness's ranks do, so the harness is not credited with
that. Commands arrive as JSON lines on stdin; answers go to stdout as ``BENCH {json}`` lines.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import sys
import time


def _rss_kb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _answer(obj) -> None:
    sys.stdout.write("BENCH " + json.dumps(obj) + "\n")
    sys.stdout.flush()


class _AmaxTimer:
    """Seconds spent in the emulated stack's global amax reduction (collective included)."""

    def __init__(self):
        self.total = 0.0
        self.installed = False

    def install(self) -> None:
        try:
            from harness.stacks.emulated.amax_buffers import GLOBAL_AMAX_BUFFERS
        except ImportError:
            return
        original = GLOBAL_AMAX_BUFFERS.reduce_and_update

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t0

        GLOBAL_AMAX_BUFFERS.reduce_and_update = timed
        self.installed = True


def main() -> int:
    rank, world = int(os.environ["BENCH_RANK"]), int(os.environ["BENCH_WORLD"])
    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist

    from harness.bench.workload import model_work
    from harness.case.spec import CaseSpec
    from harness.stacks import load_stack

    stack = load_stack(os.environ.get("BENCH_SUT", "emulated-patched"))
    store = dist.FileStore(os.environ["BENCH_STORE"], world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    group = dist.group.WORLD if world > 1 else None
    amax = _AmaxTimer()
    amax.install()
    gc.collect()
    gc.freeze()
    _answer({"ready": rank, "pid": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        if cmd["op"] == "reset":
            stack.reset()
            gc.collect()
            _answer({"reset": rank})
            continue
        cases = [CaseSpec.from_dict(c) for c in cmd["cases"]]
        per_cycle = bool(cmd.get("per_cycle"))
        rss, amax_s = [], []
        last_amax = [amax.total]

        def on_cycle(_m):
            if per_cycle:
                rss.append(_rss_kb())
                amax_s.append(amax.total - last_amax[0])
                last_amax[0] = amax.total

        if world > 1:
            dist.barrier()
        per_case, cycles = [], 0
        t0 = time.perf_counter()
        for case in cases:
            c0 = time.perf_counter()
            if cmd.get("reset_each_case"):
                stack.reset()
            cycles += model_work(case, stack, rank, world, group, cmd.get("run_seed", 0), on_cycle)
            per_case.append(time.perf_counter() - c0)
        wall = time.perf_counter() - t0
        if world > 1:
            dist.barrier()
        _answer({"rank": rank, "wall_s": wall, "per_case_s": per_case, "cycles": cycles, "rss_kb": rss,
                 "amax_s": amax_s})
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
