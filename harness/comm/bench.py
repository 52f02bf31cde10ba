"""How much of the ring all-gather the GEMM hides: :func:`measure_overlap`.

Spawns ``world_size`` ranks (one torch thread each) sharing one ``qkv`` communicator and
times, each ``repeats`` times with all ranks released together by a barrier:

* all-gather alone: the ring exchange of ``ring_allgather_gemm`` (producer copy into its
  slot, then ``world_size - 1`` steps of send/receive) with no GEMM;
* GEMM alone: the consumer side of ``ring_allgather_gemm`` (verify, decode with the
  local scale_inv, multiply) over chunks already in the buffer;
* overlapped: ``ring_allgather_gemm`` itself, which does both, the exchange on a thread.

A repetition's time is the slowest rank's; the figures are medians over repetitions.
``ratio = overlapped / (allgather + gemm)``: 1 means no overlap, and the best possible is
``max / (allgather + gemm)``. ``hidden = (allgather + gemm - overlapped) / min(allgather, gemm)``
is the fraction of the shorter phase that the overlap hid.

Run ``python -m harness.comm.bench [--m M --k K --n N --repeats R --world-size W]`` to print
the figures as JSON.

What to expect on a small CPU machine. The overlap can only hide the shorter phase, and
here the GEMM side is by far the longer: per FP8 byte moved, each consumer decodes it to
float32 (a table gather, about 1 ns per element on a 2-core EPYC VM) and multiplies it,
while copying it through shared memory costs 0.1 to 0.2 ns. With two ranks on two cores
there are four busy threads for two cores, so the copy takes its CPU time from the GEMMs and
the ratio stays near 1 however the work is ordered.

``link`` (:class:`~harness.comm.link.LinkModel`) models the transfer as a GPU does it: the
bytes are still copied, but the counter that releases them to the consumer is held until a
link of the given bandwidth would have delivered them, and the communication thread idles
meanwhile, as a copy engine leaves the SMs alone. Then the all-gather alone takes the link's
time, and the ratio shows whether the GEMM really proceeds while a chunk is in flight: a
GEMM that waited for the whole gather before starting would score 1 with or without the
model. ``--link-gbps`` sets it here; the default is the unmodelled link. Timings on a
shared machine vary a lot from run to run: look at ``samples`` before trusting one ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from harness.comm.link import LinkModel
from harness.comm.segments import new_prefix, unlink_prefix
from harness.comm.spawn import RankGroup, raise_on_failure, run_ranks
from harness.errors import UsageError

# A 64 MiB FP8 chunk per rank at world size 2: large enough that the all-gather alone
# takes well over 20 ms on a 2-core machine (about 40 ms there when it is otherwise idle).
DEFAULT_SHAPE = {"m": 16384, "k": 8192, "n": 8}


@dataclasses.dataclass(frozen=True)
class OverlapTiming:
    """Medians over repetitions, in seconds, of the slowest rank's time."""

    world_size: int
    m: int
    k: int
    n: int
    repeats: int
    allgather_s: float
    gemm_s: float
    overlapped_s: float
    ratio: float
    hidden: float
    samples: dict
    link: dict = dataclasses.field(default_factory=lambda: LinkModel().to_json())

    def summary(self) -> str:
        gain = (f"{self.hidden * 100:.0f}% of the shorter phase hidden" if self.hidden >= 0 else
                "no gain: slower than the two phases back to back")
        return (f"world {self.world_size}, m={self.m} k={self.k} n={self.n} ({self.m // self.world_size * self.k} "
                f"FP8 bytes per chunk): all-gather {self.allgather_s * 1e3:.1f} ms, GEMM {self.gemm_s * 1e3:.1f} ms, "
                f"overlapped {self.overlapped_s * 1e3:.1f} ms; ratio {self.ratio:.3f}, {gain} "
                f"(medians of {self.repeats}; {LinkModel(**self.link).describe()})")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _overlap_rank(rank: int, world_size: int, *, store_path: str, prefix: str, m_local: int, k: int, n: int,
                  repeats: int, fmt: str, deadline_s: float, barrier, link: dict | None = None) -> dict:
    """One rank of :func:`measure_overlap` (runs in a spawned process)."""
    import torch
    from torch.distributed import FileStore

    from harness.comm.communicator import Communicator
    from harness.comm.methods import OverlapMethod
    from harness.comm.operation import RING_ALLGATHER, operation
    from harness.comm.ring import Ring, ring_allgather_gemm
    from harness.fp8 import Fp8Format, cast_to_fp8

    fp8 = Fp8Format(fmt)
    gen = torch.Generator().manual_seed(1000 + rank)
    hp = torch.randn(m_local, k, generator=gen)
    weight = torch.randn(n, k, generator=torch.Generator().manual_seed(7))
    scale = torch.tensor(64.0)
    scale_inv = torch.ones(()) / scale
    local = cast_to_fp8(hp, scale, fp8)
    del hp
    out = torch.empty(m_local * world_size, n)
    gemm_out = torch.empty_like(out)
    store = FileStore(store_path, -1)
    comm = Communicator("qkv", rank, world_size, world_size * (-(-m_local * k // 64) * 64), store, prefix,
                        deadline_s, method=OverlapMethod.RING_EXCHANGE, link=LinkModel(**(link or {})))
    try:
        def allgather_only():
            # exactly the communication thread's work in ring_allgather_gemm, on this thread
            with operation(comm, RING_ALLGATHER) as seq:
                Ring(comm, (m_local, k), seq, scale_inv, fp8, own_bytes=local).exchange(None, lambda chunk: None)

        def gemm_only():
            # exactly the GEMM thread's work, on the chunks the last all-gather left in the buffer
            ring = Ring(comm, (m_local, k), comm.seq - 1, scale_inv, fp8, own_bytes=local)
            for chunk in ring.order():
                ring.gemm_chunk(chunk, weight, gemm_out)

        def overlapped():
            ring_allgather_gemm(comm, local, scale_inv, fp8, weight, out=out)

        times = {"allgather": [], "gemm": [], "overlapped": []}
        for rep in range(repeats + 1):                # the first round warms pages and caches
            barrier.wait(deadline_s)
            t0 = time.perf_counter()
            allgather_only()
            t1 = time.perf_counter()
            barrier.wait(deadline_s)
            t2 = time.perf_counter()
            gemm_only()
            t3 = time.perf_counter()
            barrier.wait(deadline_s)
            t4 = time.perf_counter()
            overlapped()
            t5 = time.perf_counter()
            if rep:
                times["allgather"].append(t1 - t0)
                times["gemm"].append(t3 - t2)
                times["overlapped"].append(t5 - t4)
        same = bool(torch.equal(out.view(torch.int32), gemm_out.view(torch.int32)))
        return {"times": times, "same_output": same}
    finally:
        comm.close()


def measure_overlap(
    world_size: int = 2,
    m: int = DEFAULT_SHAPE["m"],
    k: int = DEFAULT_SHAPE["k"],
    n: int = DEFAULT_SHAPE["n"],
    repeats: int = 5,
    *,
    fmt: str = "E4M3",
    deadline_s: float = 60.0,
    timeout_s: float | None = None,
    group: RankGroup | None = None,
    link: LinkModel | None = None,
) -> OverlapTiming:
    """Time all-gather alone, GEMM alone and the overlapped all-gather + GEMM.

    ``m`` is the number of rows after the gather (``m / world_size`` per rank), ``k`` the
    inner dimension, ``n`` the weight's rows; the FP8 chunk each rank contributes is
    ``m / world_size * k`` bytes. Ranks run in spawned processes with one torch thread.
    ``group`` runs the ranks on an existing :class:`~harness.comm.spawn.RankGroup` of
    ``world_size`` ranks (one torch thread each) instead of fresh processes. Everything the
    run creates in ``/dev/shm`` is removed afterwards, whatever happened. ``link`` models the
    transfer time between ranks (default: unmodelled, a transfer takes as long as its copy).
    """
    link = link if link is not None else LinkModel()
    if world_size < 1 or m % world_size or min(m, k, n, repeats) < 1:
        raise UsageError(f"measure_overlap: need world_size >= 1, m divisible by world_size and positive "
                         f"k, n, repeats; got world_size={world_size} m={m} k={k} n={n} repeats={repeats}")
    prefix = new_prefix()
    tmp = tempfile.mkdtemp(prefix="fp8h-bench-")
    try:
        kwargs = dict(store_path=os.path.join(tmp, "store"), prefix=prefix, m_local=m // world_size, k=k, n=n,
                      repeats=repeats, fmt=fmt, deadline_s=deadline_s, link=link.to_json())
        limit = timeout_s if timeout_s is not None else 120.0 + 10.0 * repeats
        if group is None:
            outcomes = run_ranks(_overlap_rank, world_size, kwargs, timeout_s=limit, threads=1, barrier=True)
        else:
            if group.world_size != world_size:
                raise UsageError(f"measure_overlap: the rank group has {group.world_size} ranks, "
                                 f"world_size is {world_size}")
            outcomes = group.run(_overlap_rank, kwargs, timeout_s=limit, barrier=True)
        results = raise_on_failure(outcomes, "measure_overlap")
    finally:
        unlink_prefix(prefix)
        shutil.rmtree(tmp, ignore_errors=True)
    if not all(r["same_output"] for r in results):
        raise AssertionError("measure_overlap: overlapped and GEMM-only outputs differ")
    medians = {}
    for phase in ("allgather", "gemm", "overlapped"):
        per_rep = [max(r["times"][phase][i] for r in results) for i in range(repeats)]
        medians[phase] = statistics.median(per_rep)
    ag, gemm, both = medians["allgather"], medians["gemm"], medians["overlapped"]
    return OverlapTiming(
        world_size=world_size, m=m, k=k, n=n, repeats=repeats,
        allgather_s=ag, gemm_s=gemm, overlapped_s=both,
        ratio=both / (ag + gemm), hidden=(ag + gemm - both) / min(ag, gemm),
        samples={f"rank{i}": r["times"] for i, r in enumerate(results)}, link=link.to_json())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.comm.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=DEFAULT_SHAPE["m"])
    parser.add_argument("--k", type=int, default=DEFAULT_SHAPE["k"])
    parser.add_argument("--n", type=int, default=DEFAULT_SHAPE["n"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--link-gbps", type=float, default=None,
                        help="model the link at this many GB/s (default: unmodelled, as fast as the copy)")
    args = parser.parse_args(argv)
    try:
        link = LinkModel.from_gbps(args.link_gbps)
    except UsageError as exc:
        print(f"error: --link-gbps: {exc}", file=sys.stderr)
        return 2
    timing = measure_overlap(args.world_size, args.m, args.k, args.n, args.repeats, link=link)
    print(timing.summary())
    print(json.dumps({k: v for k, v in timing.to_dict().items() if k != "samples"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
