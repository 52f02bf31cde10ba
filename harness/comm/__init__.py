"""A CPU emulation of Transformer Engine's Userbuffers (communication-GEMM overlap).

One shared-memory buffer and one flag region per (communicator, rank), mapped by every
peer; monotonic counters (data written, then counter bumped in the receiver's region);
deadline-bounded waits; communication on a thread beside the GEMM. Failure modes match the
real thing: a rank whose scale differs makes consumers read mis-scaled chunks (caught by
the integrity oracle), a rank that issues one operation more or less leaves counters out
of step (a wait that hits its deadline). The design: docs/design.md, "Userbuffers emulation".

Modules, one concept each:

* :mod:`~harness.comm.segments` -- ``/dev/shm`` segments, run prefixes, clean-up
* :mod:`~harness.comm.flags` -- counters and deadline-bounded waits
* :mod:`~harness.comm.link` -- :class:`LinkModel`, how long a transfer to a peer is in flight
* :mod:`~harness.comm.methods` -- :class:`OverlapMethod`, TE's method for each communicator
* :mod:`~harness.comm.communicator` -- :class:`Communicator`: slots, headers, counters, put and wait
* :mod:`~harness.comm.handshake` -- how the ranks map each other's segments through a store
* :mod:`~harness.comm.live` -- the live registry (:func:`get_ub`, :func:`destroy_ub`)
* :mod:`~harness.comm.integrity` -- chunk headers, checksums, :class:`BufferIntegrityError`
* :mod:`~harness.comm.arrivals` -- a counter raised before its chunk landed, a read before it
* :mod:`~harness.comm.decode` -- exact table-driven FP8 decode
* :mod:`~harness.comm.operation` -- one operation's lifetime and its communication thread
* :mod:`~harness.comm.chunks` -- a chunk written and verified; an operation's arguments checked
* :mod:`~harness.comm.ring`, :mod:`~harness.comm.reduce_scatter`, :mod:`~harness.comm.bulk` -- the
  operations
* :mod:`~harness.comm.reference` -- the same math done locally
* :mod:`~harness.comm.spawn` -- run a function on spawned ranks, bounded
* :mod:`~harness.comm.bench` -- :func:`measure_overlap`
"""

# Each name from the module that defines it, imported on first use: the link model and the
# segment helpers are wanted where torch is not (option parsing before any rank starts).
_EXPORTS = {
    "Communicator": "communicator", "OverlapMethod": "methods", "TE_DEFAULT_METHODS": "methods",
    "initialize_ub": "communicator", "get_ub": "live", "destroy_ub": "live", "live_communicators": "live",
    "BufferIntegrityError": "integrity", "IntegrityMode": "integrity",
    "StagedChunk": "ring", "cast_into_buffer": "ring", "ring_allgather_gemm": "ring",
    "ring_allgather_gemm_hp": "ring", "gemm_reduce_scatter": "reduce_scatter", "bulk_allgather": "bulk",
    "bulk_reduce_scatter": "bulk",
    "leftover_segments": "segments", "new_prefix": "segments", "unlink_prefix": "segments",
    "measure_overlap": "bench",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness.comm' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"harness.comm.{module}"), name)
    globals()[name] = value
    return value
