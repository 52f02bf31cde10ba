"""The overlapped operations: ring-exchange all-gather + GEMM, pipelined GEMM + reduce-scatter,
and the bulk (non-overlapped) collectives.

Every rank of a communicator calls the same operations in the same order (the counters
are never reset). Communication runs on a background thread while the calling thread does
the GEMM: torch kernels (copies, decode, matmul) release the GIL, so the two really run at
once. For a real overlap on a small machine, call ``torch.set_num_threads(1)`` in each
rank so the GEMM and the communication each get a core.

Numerics, defined so that a reference can follow them exactly (see
:mod:`harness.comm.reference`):

* all-gather + GEMM: chunk ``c`` (rank ``c``'s rows) is dequantized with the *consumer's*
  ``scale_inv`` (TE assumes every rank's scale is the same) and multiplied on its own:
  ``out[c*m_local:(c+1)*m_local] = dequantize(chunk_c, scale_inv_local) @ weight.T`` in
  float32. Rows come out in rank order whatever order the ring delivers them in.
* GEMM + reduce-scatter: rank ``r`` computes partial chunk ``j`` as
  ``inp[j*mc:(j+1)*mc] @ weight.T`` (``mc = m / world_size``) and the owner of chunk ``j``
  sums the partials in the fixed order rank 0, 1, ..., ``world_size - 1``:
  ``((p_0 + p_1) + p_2) + ...``, so the result is bitwise reproducible.

A failed operation (deadline, integrity) leaves the counters out of step: the
communicator refuses further operations, and the error names what to look at.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time

import torch

from harness.comm.communicator import Arrival, Communicator, OverlapMethod
from harness.comm.integrity import HEADER_BYTES, BufferIntegrityError, ChunkHeader, IntegrityMode, make_header, verify_chunk
from harness.comm.flags import WaitCancelled
from harness.errors import DeadlineExceeded, HarnessError, UsageError
from harness.fp8.cast import cast_to_fp8
from harness.fp8.formats import Fp8Format

RING_ALLGATHER = "ring all-gather"
PIPELINED_REDUCE_SCATTER = "pipelined reduce-scatter"
BULK_ALLGATHER = "bulk all-gather"
BULK_REDUCE_SCATTER = "bulk reduce-scatter"

_JOIN_GRACE_S = 5.0


@dataclasses.dataclass(frozen=True)
class StagedChunk:
    """A rank's local chunk, already cast into its slot by :func:`cast_into_buffer`."""

    communicator: str
    rank: int
    seq: int
    shape: tuple[int, int]
    fmt: Fp8Format
    scale_inv: torch.Tensor


# --------------------------------------------------------------------------- helpers
def _require_method(comm: Communicator, method: OverlapMethod, op: str) -> None:
    if comm.method is not method:
        raise UsageError(f"userbuffers {comm.name!r} is configured for {comm.method.value}; "
                         f"{op} needs a {method.value} communicator")


def _scalar(value, what: str) -> torch.Tensor:
    t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
    if t.numel() != 1:
        raise UsageError(f"{what} must be a single value, got shape {list(t.shape)}")
    return t.detach().reshape(()).to(torch.float32)


def _matrix(t: torch.Tensor, what: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        raise UsageError(f"{what} must be a 2-D tensor, got "
                         f"{type(t).__name__ if not isinstance(t, torch.Tensor) else list(t.shape)}")
    if dtype is not None and t.dtype != dtype:
        raise UsageError(f"{what} must be {dtype}, got {t.dtype}")
    return t.detach().contiguous()


def _weight(weight_hp: torch.Tensor, k: int, what: str = "weight_hp") -> torch.Tensor:
    w = _matrix(weight_hp, what)
    if not w.is_floating_point():
        raise UsageError(f"{what} must be a floating-point tensor, got {w.dtype}")
    if w.shape[1] != k:
        raise UsageError(f"{what} is {list(w.shape)}; expected [n, {k}] to match the input")
    return w.to(torch.float32)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def _verify(comm: Communicator, arrival: Arrival | None = None, **fields) -> None:
    """The integrity oracle on one chunk, unless the communicator runs with integrity off.

    ``arrival``: what the read saw (``Communicator.check_arrived``); a chunk that fails because
    the producer's write landed only after the read is reported as such
    (``Communicator.explain_early_read``), not as a missing or foreign header."""
    if comm.integrity is IntegrityMode.OFF:
        return
    try:
        verify_chunk(communicator=comm.name, **fields)
    except BufferIntegrityError as exc:
        if arrival is None:
            raise
        raise comm.explain_early_read(exc, arrival, producer=fields["producer"], seq=fields["seq"],
                                      header=fields["header"], data=fields["data"]) from None



def _header(comm: Communicator, **fields) -> ChunkHeader | None:
    return None if comm.integrity is IntegrityMode.OFF else make_header(**fields)


@contextlib.contextmanager
def _operation(comm: Communicator, op: str):
    """begin_op ... end_op; a failure poisons the communicator (its counters are out of step)."""
    seq = comm.begin_op(op)
    try:
        yield seq
        comm.raise_early_signal()     # a counter this operation raised before its payload landed
    except BaseException as exc:
        comm.poison(f"{op} operation #{seq} failed: {type(exc).__name__}: {exc}")
        if isinstance(exc, Exception):
            comm.raise_early_signal(exc)     # this rank's own early counter comes first
        raise
    comm.end_op()


class _Background:
    """The communication thread of one operation, and its hand-offs to the GEMM thread.

    The thread marks chunks ready; the GEMM thread waits for them with a bound. An error
    on either side sets ``cancel`` so the other side stops waiting instead of running into
    its own deadline; the first error is the one raised.
    """

    def __init__(self, comm: Communicator, op: str, seq: int):
        self.comm = comm
        self.op = op
        self.seq = seq
        self.cancel = threading.Event()
        self._cond = threading.Condition()
        self._ready: set[int] = set()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        # the thread's waits each have comm.deadline_s; a whole operation has at most
        # world_size of them in sequence
        self.bound_s = comm.deadline_s * max(1, comm.world_size) + _JOIN_GRACE_S

    def start(self, fn, *args) -> None:
        def run():
            try:
                fn(*args)
            except BaseException as exc:     # handed to the GEMM thread, raised there
                with self._cond:
                    self._error = exc
                    self.cancel.set()
                    self._cond.notify_all()
        self._thread = threading.Thread(target=run, name=f"ub-{self.comm.name}-r{self.comm.rank}-op{self.seq}",
                                        daemon=True)
        self._thread.start()

    def mark_ready(self, chunk: int) -> None:
        with self._cond:
            self._ready.add(chunk)
            self._cond.notify_all()

    def wait_ready(self, chunk: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: chunk in self._ready or self._error is not None, self.bound_s)
            if self._error is not None:
                raise self._error
            if not ok:
                raise DeadlineExceeded(
                    f"userbuffers {self.comm.name!r} {self.op}: rank {self.comm.rank}'s GEMM thread waiting for "
                    f"chunk {chunk} from its communication thread", self.bound_s, f"operation #{self.seq}")

    def finish(self) -> None:
        """Join the thread (bounded) and raise its error, if any."""
        if self._thread is None:
            return
        self._thread.join(self.bound_s)
        if self._thread.is_alive():
            self.cancel.set()
            raise DeadlineExceeded(f"userbuffers {self.comm.name!r} {self.op}: rank {self.comm.rank}'s "
                                   f"communication thread did not finish", self.bound_s, f"operation #{self.seq}")
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """After a failure on the GEMM thread: stop the thread's waits and join it (bounded)."""
        self.cancel.set()
        if self._thread is not None:
            self._thread.join(self.bound_s)


def _reraise_primary(background: _Background, exc: BaseException) -> BaseException:
    """If the GEMM thread failed only because the comm thread was cancelled, prefer the cause."""
    if isinstance(exc, WaitCancelled) and background._error is not None:
        return background._error
    return exc


# ---------------------------------------------------------------- producer side
def _record_own_chunk(comm: Communicator, seq: int, nbytes: int, fmt: Fp8Format | None,
                      scale_inv: torch.Tensor | None) -> None:
    """Header (checksum, scale_inv) for this rank's chunk as it now sits in its slot; in
    full mode also the recorded copy consumers compare against."""
    r = comm.rank
    data = comm.slot(r, r, nbytes)
    header = _header(comm, producer=r, chunk=r, seq=seq, data=data, fmt=fmt, scale_inv=scale_inv)
    if header is None:
        return
    comm.write_header(r, header)
    shadow = comm.shadow_view(r, seq, nbytes)
    if shadow is not None:
        shadow.copy_(data)


def cast_into_buffer(comm: Communicator, hp_local: torch.Tensor, scale, fmt: Fp8Format,
                     *, scale_inv=None) -> StagedChunk:
    """Cast ``hp_local`` ([m_local, k], high precision) straight into this rank's chunk of
    its buffer, for the communicator's next all-gather; record checksum and ``scale_inv``.

    The cast is :func:`harness.fp8.cast_to_fp8` (saturating, NaN -> 0x7F). ``scale_inv``
    defaults to ``1 / scale`` as a float32 tensor division, the recipe's own formula.
    Pass the result to :func:`ring_allgather_gemm` (or use :func:`ring_allgather_gemm_hp`).
    """
    if comm.closed:
        raise HarnessError(f"userbuffers {comm.name!r}: the communicator is closed")
    hp = _matrix(hp_local, "hp_local")
    scale_t = _scalar(scale, "scale")
    scale_inv_t = (torch.ones((), dtype=torch.float32) / scale_t) if scale_inv is None else \
        _scalar(scale_inv, "scale_inv")
    m_local, k = hp.shape
    nbytes = m_local * k
    comm.check_chunk_fits(nbytes, RING_ALLGATHER)
    q = cast_to_fp8(hp, scale_t, fmt)
    comm.slot(comm.rank, comm.rank, nbytes).view(m_local, k).copy_(q)
    _record_own_chunk(comm, comm.seq, nbytes, fmt, scale_inv_t)
    return StagedChunk(comm.name, comm.rank, comm.seq, (m_local, k), fmt, scale_inv_t)


def _check_staged(comm: Communicator, staged: StagedChunk) -> None:
    if (staged.communicator, staged.rank) != (comm.name, comm.rank) or staged.seq != comm.seq:
        raise UsageError(f"userbuffers {comm.name!r} rank {comm.rank}: the staged chunk was cast into "
                         f"{staged.communicator!r} rank {staged.rank} for operation #{staged.seq}, but this "
                         f"communicator's next operation is #{comm.seq}")


# ------------------------------------------------------------- ring all-gather
class _Ring:
    """One ring-exchange all-gather: the exchange (comm thread) and the per-chunk GEMM.

    ``own_bytes``: this rank's FP8 bytes as the caller passed them, not yet in the buffer.
    Then the communication thread first copies them into the rank's slot (and records the
    header) while the GEMM thread already multiplies the local chunk from the caller's
    tensor: that chunk never crosses a buffer, so there is nothing to verify for it.
    """

    def __init__(self, comm: Communicator, shape: tuple[int, int], seq: int, scale_inv: torch.Tensor,
                 fmt: Fp8Format, own_bytes: torch.Tensor | None = None):
        self.comm = comm
        self.seq = seq
        self.m_local, self.k = shape
        self.nbytes = self.m_local * self.k
        self.tp = comm.world_size
        self.rank = comm.rank
        self.scale_inv = scale_inv
        self.fmt = fmt
        self.own_bytes = own_bytes

    def order(self) -> list[int]:
        """Chunk multiplied at step i: ``(rank - i) mod tp`` (own chunk first)."""
        return [(self.rank - i) % self.tp for i in range(self.tp)]

    def stage(self) -> None:
        """Copy the caller's bytes into this rank's slot and record checksum and scale_inv."""
        if self.own_bytes is not None:
            self.comm.slot(self.rank, self.rank, self.nbytes).copy_(self.own_bytes.reshape(-1))
            _record_own_chunk(self.comm, self.seq, self.nbytes, self.fmt, self.scale_inv)

    def exchange(self, cancel: threading.Event | None, on_ready) -> None:
        """Stage, then step i: send chunk ``(rank - i) mod tp`` to the next rank, receive
        ``(rank - i - 1) mod tp`` from the previous one. Every chunk travels with its
        producer's header."""
        self.stage()
        comm, tp, r = self.comm, self.tp, self.rank
        nxt, prv = (r + 1) % tp, (r - 1) % tp
        for i in range(tp - 1):
            comm.put(nxt, (r - i) % tp, self.nbytes, RING_ALLGATHER, cancel)
            recv = (r - i - 1) % tp
            comm.wait_data(prv, recv, RING_ALLGATHER, recv, cancel)
            on_ready(recv)

    def gemm_chunk(self, chunk: int, weight: torch.Tensor, out: torch.Tensor) -> None:
        """Verify chunk ``chunk`` (producer = rank ``chunk``), decode it with this rank's
        ``scale_inv``, multiply into its rows of ``out``."""
        comm = self.comm
        if chunk == self.rank and self.own_bytes is not None:
            data = self.own_bytes
        else:
            arrival = None
            if chunk != self.rank:            # (a staged own chunk was written here by this rank)
                arrival = comm.check_arrived((self.rank - 1) % self.tp, chunk, RING_ALLGATHER, chunk)
            data = comm.slot(self.rank, chunk, self.nbytes)
            _verify(comm, arrival, op=RING_ALLGATHER, chunk=chunk, producer=chunk, consumer=self.rank, seq=self.seq,
                    header=comm.read_header(chunk), data=data, consumer_scale_inv=self.scale_inv, fmt=self.fmt,
                    shadow=comm.shadow_view(chunk, self.seq, self.nbytes))
        x = comm.workspace("ag.decoded", (self.m_local, self.k), torch.float32)
        index = comm.workspace("ag.index", (self.nbytes // 2,), torch.int32)
        comm.decode_cache.table(self.fmt, self.scale_inv).decode_into(data, x, index)
        # multiply into an aligned workspace, then copy: MKL may round differently for
        # differently aligned operands, and a row block of ``out`` need not be aligned
        product = comm.workspace("ag.product", (self.m_local, weight.shape[0]), torch.float32)
        torch.mm(x, weight.t(), out=product)
        out[chunk * self.m_local:(chunk + 1) * self.m_local].copy_(product)

    def run(self, weight: torch.Tensor, out: torch.Tensor) -> None:
        background = _Background(self.comm, RING_ALLGATHER, self.seq)
        background.start(self.exchange, background.cancel, background.mark_ready)
        try:
            for i, chunk in enumerate(self.order()):
                if i > 0:
                    background.wait_ready(chunk)
                self.gemm_chunk(chunk, weight, out)
        except BaseException as exc:
            background.abort()
            raise _reraise_primary(background, exc)
        background.finish()


def _ring_output(out: torch.Tensor | None, rows: int, n: int) -> torch.Tensor:
    if out is None:
        return torch.empty(rows, n, dtype=torch.float32)
    if out.shape != (rows, n) or out.dtype != torch.float32 or not out.is_contiguous():
        raise UsageError(f"out must be a contiguous float32 [{rows}, {n}] tensor, got "
                         f"{out.dtype}{list(out.shape)}")
    return out


def ring_allgather_gemm(
    comm: Communicator,
    local_chunk_fp8: torch.Tensor | StagedChunk,
    scale_inv_local,
    fmt: Fp8Format | None,
    weight_hp: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """All-gather FP8 row chunks around the ring while multiplying them: ``[m_local*tp, n]``.

    ``local_chunk_fp8``: this rank's FP8 bytes (``uint8 [m_local, k]``), copied into its
    slot, or the :class:`StagedChunk` from :func:`cast_into_buffer` (already in place; then
    ``scale_inv_local`` and ``fmt`` may be None and default to the staged ones).
    ``scale_inv_local`` is what this rank dequantizes *every* chunk with; ``weight_hp``
    is ``[n, k]`` (computed in float32). At step ``i`` the rank multiplies chunk
    ``(rank - i) mod tp`` while its communication thread sends that chunk on and receives
    the next. Each chunk is verified (:mod:`harness.comm.integrity`) before use.
    """
    op = RING_ALLGATHER
    _require_method(comm, OverlapMethod.RING_EXCHANGE, op)
    if isinstance(local_chunk_fp8, StagedChunk):
        _check_staged(comm, local_chunk_fp8)
        fmt = local_chunk_fp8.fmt if fmt is None else fmt
        scale_inv = local_chunk_fp8.scale_inv if scale_inv_local is None else _scalar(scale_inv_local, "scale_inv_local")
    else:
        if fmt is None or scale_inv_local is None:
            raise UsageError(f"{op}: fmt and scale_inv_local are required with a uint8 local chunk")
        scale_inv = _scalar(scale_inv_local, "scale_inv_local")
    if not isinstance(fmt, Fp8Format):
        raise UsageError(f"{op}: fmt must be an Fp8Format, got {fmt!r}")
    # validate everything before the operation starts: a failure inside it poisons the communicator
    if isinstance(local_chunk_fp8, StagedChunk):
        local, (m_local, k) = None, local_chunk_fp8.shape
    else:
        local = _matrix(local_chunk_fp8, "local_chunk_fp8", torch.uint8)
        m_local, k = local.shape
        comm.check_chunk_fits(m_local * k, op)
    weight = _weight(weight_hp, k)
    result = _ring_output(out, m_local * comm.world_size, weight.shape[0])
    with _operation(comm, op) as seq:
        _Ring(comm, (m_local, k), seq, scale_inv, fmt, own_bytes=local).run(weight, result)
    return result


def ring_allgather_gemm_hp(
    comm: Communicator,
    hp_local: torch.Tensor,
    scale,
    fmt: Fp8Format,
    weight_hp: torch.Tensor,
    *,
    scale_inv=None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`cast_into_buffer` then :func:`ring_allgather_gemm`: the producer casts its
    high-precision input straight into its chunk, every consumer uses its own scale_inv."""
    staged = cast_into_buffer(comm, hp_local, scale, fmt, scale_inv=scale_inv)
    return ring_allgather_gemm(comm, staged, None, None, weight_hp, out=out)


# ------------------------------------------------------ pipelined reduce-scatter
def _put_tensor(comm: Communicator, dst: int, slot: int, data: torch.Tensor, header: ChunkHeader | None,
                op: str, cancel: threading.Event | None) -> None:
    """Write ``data`` (uint8) and its header into ``dst``'s ``slot``, then bump the counter."""
    comm.wait_release(dst, op, cancel)
    started = time.perf_counter()
    if header is not None:
        header.pack_into(comm.data[dst].buffer(), comm.header_offset(slot))
    comm.slot(dst, slot, data.numel()).copy_(data)
    comm.land(started, HEADER_BYTES + data.numel(), cancel)
    comm.signal(dst, slot)


def _receive_partial(comm: Communicator, src: int, seq: int, nbytes: int, op: str, shape, dtype,
                     cancel: threading.Event | None) -> torch.Tensor:
    """Wait for rank ``src``'s partial of this rank's chunk (in slot ``src``) and verify it."""
    r = comm.rank
    comm.wait_data(src, src, op, r, cancel)
    arrival = comm.check_arrived(src, src, op, r)
    data = comm.slot(r, src, nbytes)
    _verify(comm, arrival, op=op, chunk=r, producer=src, consumer=r, seq=seq, header=comm.read_header(src), data=data)
    return data.view(dtype).view(shape)


def _sum_in_rank_order(comm: Communicator, own: torch.Tensor, seq: int, op: str, out: torch.Tensor,
                       cancel: threading.Event | None) -> torch.Tensor:
    """``out = ((p_0 + p_1) + p_2) + ...``: partials of this rank's chunk, rank order."""
    nbytes = own.numel() * own.element_size()
    for src in range(comm.world_size):
        part = own if src == comm.rank else \
            _receive_partial(comm, src, seq, nbytes, op, tuple(own.shape), own.dtype, cancel)
        if src == 0:
            out.copy_(part)
        else:
            torch.add(out, part, out=out)
    return out


def gemm_reduce_scatter(
    comm: Communicator,
    inp_hp: torch.Tensor,
    weight_hp: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Row-parallel GEMM with its reduce-scatter pipelined behind it: ``[m / tp, n]``.

    ``inp_hp`` is this rank's ``[m, k_local]`` slice of the input, ``weight_hp`` its
    ``[n, k_local]`` slice of the weight. The rank computes its partial product chunk by
    chunk (chunk ``j`` = rows ``j*m/tp ...``, starting with the next rank's and ending with
    its own) and its communication thread ships each finished chunk to the chunk's owner
    while the next one is computed. The owner then sums the partials in rank order
    0, 1, ..., tp-1 (fixed, so the result is bitwise reproducible).
    """
    op = PIPELINED_REDUCE_SCATTER
    _require_method(comm, OverlapMethod.PIPELINE, op)
    inp = _matrix(inp_hp, "inp_hp").to(torch.float32)
    weight = _weight(weight_hp, inp.shape[1])
    tp, r = comm.world_size, comm.rank
    m, n = inp.shape[0], weight.shape[0]
    if m % tp:
        raise UsageError(f"{op}: {m} rows do not split into {tp} equal chunks")
    mc = m // tp
    nbytes = mc * n * 4
    comm.check_chunk_fits(nbytes, op)
    result = _ring_output(out, mc, n)
    with _operation(comm, op) as seq:
        background = _Background(comm, op, seq)
        outbox: queue.Queue = queue.Queue()

        def ship() -> None:
            while True:
                item = outbox.get(timeout=background.bound_s)
                if item is None:
                    return
                j, part = item
                data = part.reshape(-1).view(torch.uint8)
                header = _header(comm, producer=r, chunk=j, seq=seq, data=data)
                _put_tensor(comm, j, r, data, header, op, background.cancel)
                background.mark_ready(j)

        background.start(ship)
        try:
            own = None
            for i in range(1, tp + 1):
                j = (r + i) % tp
                part = comm.workspace(f"rs.partial{j}", (mc, n), torch.float32)
                torch.mm(inp[j * mc:(j + 1) * mc], weight.t(), out=part)
                if j == r:
                    own = part
                else:
                    outbox.put((j, part))
            outbox.put(None)
            _sum_in_rank_order(comm, own, seq, op, result, background.cancel)
        except BaseException as exc:
            outbox.put(None)
            background.abort()
            raise _reraise_primary(background, exc)
        background.finish()
    return result


# ------------------------------------------------------------------- bulk ops
def bulk_allgather(
    comm: Communicator,
    local: torch.Tensor,
    *,
    scale_inv_local=None,
    fmt: Fp8Format | None = None,
) -> torch.Tensor:
    """All-gather without overlap: ``[m_local * tp, ...]`` in rank order (a private tensor).

    ``local`` is any contiguous tensor (FP8 bytes as ``uint8``, or high precision). Each
    rank writes its chunk into every peer's buffer, then waits for and verifies the
    others'. With ``fmt`` and ``scale_inv_local`` the chunks are checked as FP8 data: each
    producer's scale_inv must equal this rank's.
    """
    op = BULK_ALLGATHER
    if not isinstance(local, torch.Tensor) or local.dim() < 1:
        raise UsageError(f"{op}: local must be a tensor with at least one dimension")
    if (fmt is None) != (scale_inv_local is None):
        raise UsageError(f"{op}: pass both fmt and scale_inv_local, or neither")
    scale_inv = None if scale_inv_local is None else _scalar(scale_inv_local, "scale_inv_local")
    src_bytes = _as_bytes(local)
    nbytes = src_bytes.numel()
    comm.check_chunk_fits(nbytes, op)
    tp, r = comm.world_size, comm.rank
    gathered = torch.empty((local.shape[0] * tp,) + tuple(local.shape[1:]), dtype=local.dtype)
    out_bytes = _as_bytes(gathered) if gathered.numel() else gathered.view(torch.uint8)
    with _operation(comm, op) as seq:
        comm.slot(r, r, nbytes).copy_(src_bytes)
        _record_own_chunk(comm, seq, nbytes, fmt, scale_inv)
        for i in range(1, tp):
            comm.put((r + i) % tp, r, nbytes, op)
        out_bytes[r * nbytes:(r + 1) * nbytes].copy_(src_bytes)
        for src in range(tp):
            if src == r:
                continue
            comm.wait_data(src, src, op, src)
            arrival = comm.check_arrived(src, src, op, src)
            data = comm.slot(r, src, nbytes)
            _verify(comm, arrival, op=op, chunk=src, producer=src, consumer=r, seq=seq, header=comm.read_header(src),
                    data=data, consumer_scale_inv=scale_inv, fmt=fmt, shadow=comm.shadow_view(src, seq, nbytes))
            out_bytes[src * nbytes:(src + 1) * nbytes].copy_(data)
    return gathered


def bulk_reduce_scatter(comm: Communicator, partial: torch.Tensor) -> torch.Tensor:
    """Reduce-scatter without overlap: ``[m / tp, ...]``, summed in rank order 0..tp-1.

    ``partial`` is this rank's ``[m, ...]`` floating-point contribution; chunk ``j`` (rows
    ``j*m/tp ...``) goes to rank ``j``.
    """
    op = BULK_REDUCE_SCATTER
    if not isinstance(partial, torch.Tensor) or partial.dim() < 1 or not partial.is_floating_point():
        raise UsageError(f"{op}: partial must be a floating-point tensor with at least one dimension")
    tp, r = comm.world_size, comm.rank
    full = partial.detach().contiguous()
    if full.shape[0] % tp:
        raise UsageError(f"{op}: {full.shape[0]} rows do not split into {tp} equal chunks")
    mc = full.shape[0] // tp
    chunks = [full[j * mc:(j + 1) * mc] for j in range(tp)]
    nbytes = chunks[0].numel() * chunks[0].element_size()
    comm.check_chunk_fits(nbytes, op)
    result = torch.empty_like(chunks[r])
    with _operation(comm, op) as seq:
        for i in range(1, tp):
            j = (r + i) % tp
            data = _as_bytes(chunks[j])
            _put_tensor(comm, j, r, data, _header(comm, producer=r, chunk=j, seq=seq, data=data), op, None)
        _sum_in_rank_order(comm, chunks[r], seq, op, result, None)
    return result
