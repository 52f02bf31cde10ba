"""Rank bodies for the flight-recorder tests (spawned processes: the recorder's size is read
when a process makes its first process group, so each rank sets it before that)."""

from __future__ import annotations

import datetime
import os


def unmatched_all_reduce_rank(rank: int, world_size: int, *, store_path: str) -> dict:
    """Two collectives every rank issues, then one only rank 0 issues (left pending); returns
    this rank's dump, and its formatted text."""
    os.environ.update({"TORCH_FR_BUFFER_SIZE": "50", "TORCH_NCCL_TRACE_BUFFER_SIZE": "50"})
    import torch
    import torch.distributed as dist

    from harness.hangs import flight_recorder

    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=20))
    try:
        dist.all_reduce(torch.ones(3))
        dist.all_gather([torch.empty(2) for _ in range(world_size)], torch.ones(2))
        # torch symbolizes the recorded frames on a process's first dump (seconds, more under load;
        # later dumps take milliseconds): done here, on both ranks at once, where no collective is
        # pending. Made while rank 0's third waited (both ranks' in turn), it outlasted gloo's timeout.
        flight_recorder.dump()
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:
            work = dist.all_reduce(torch.ones(5), async_op=True)     # no peer yet: stays pending
            dumped = flight_recorder.dump()
            store.set("dumped", "1")
            work.wait()                                              # rank 1 issues its match now
        else:
            store.wait(["dumped"])
            dumped = flight_recorder.dump()
            dist.all_reduce(torch.ones(5))
        return {"dump": dumped, "text": flight_recorder.format_dump(dumped)}
    finally:
        dist.destroy_process_group()
