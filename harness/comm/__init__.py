"""A CPU emulation of Transformer Engine's Userbuffers (communication-GEMM overlap).

One shared-memory buffer and one flag region per (communicator, rank), mapped by every
peer; monotonic counters (data written, then counter bumped in the receiver's region);
deadline-bounded waits; communication on a thread beside the GEMM. Failure modes match the
real thing: a rank whose scale differs makes consumers read mis-scaled chunks (caught by
the integrity oracle), a rank that issues one operation more or less leaves counters out
of step (a wait that hits its deadline).

Modules, one concept each:

* :mod:`~harness.comm.segments` -- ``/dev/shm`` segments, run prefixes, clean-up
* :mod:`~harness.comm.flags` -- counters and deadline-bounded waits
* :mod:`~harness.comm.link` -- :class:`LinkModel`, how long a transfer to a peer is in flight
* :mod:`~harness.comm.communicator` -- :class:`Communicator`, set-up through a store, the
  live registry (:func:`get_ub`, :func:`destroy_ub`)
* :mod:`~harness.comm.integrity` -- chunk headers, checksums, :class:`BufferIntegrityError`
* :mod:`~harness.comm.decode` -- exact table-driven FP8 decode
* :mod:`~harness.comm.overlap` -- the operations
* :mod:`~harness.comm.reference` -- the same math done locally
* :mod:`~harness.comm.spawn` -- run a function on spawned ranks, bounded
* :mod:`~harness.comm.bench` -- :func:`measure_overlap`
"""

from harness.comm.communicator import (
    Communicator,
    OverlapMethod,
    TE_DEFAULT_METHODS,
    destroy_ub,
    get_ub,
    initialize_ub,
    live_communicators,
)
from harness.comm.integrity import BufferIntegrityError, IntegrityMode
from harness.comm.overlap import (
    StagedChunk,
    bulk_allgather,
    bulk_reduce_scatter,
    cast_into_buffer,
    gemm_reduce_scatter,
    ring_allgather_gemm,
    ring_allgather_gemm_hp,
)
from harness.comm.segments import leftover_segments, new_prefix, unlink_prefix

__all__ = [
    "Communicator", "OverlapMethod", "TE_DEFAULT_METHODS", "initialize_ub", "get_ub", "destroy_ub",
    "live_communicators",
    "BufferIntegrityError", "IntegrityMode",
    "StagedChunk", "cast_into_buffer", "ring_allgather_gemm", "ring_allgather_gemm_hp",
    "gemm_reduce_scatter", "bulk_allgather", "bulk_reduce_scatter",
    "leftover_segments", "new_prefix", "unlink_prefix",
    "measure_overlap",
]


def __getattr__(name):
    # measure_overlap pulls in the process launcher; import it only when asked for
    if name == "measure_overlap":
        from harness.comm.bench import measure_overlap
        return measure_overlap
    raise AttributeError(f"module 'harness.comm' has no attribute {name!r}")
