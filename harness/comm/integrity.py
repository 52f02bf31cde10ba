"""The buffer-integrity oracle (oracle 6): what a consumer reads is what the producer wrote,
with the scale it was written with.

The producer of a chunk (the rank whose data it is) records, in the chunk's 64-byte header
next to it in the buffer, a checksum of the bytes it wrote and the ``scale_inv`` it cast
them with. Ranks that forward the chunk around the ring copy the header with it. Before
using a chunk, every consumer checks:

* the chunk was waited for: the consumer's wait saw the producer's counter reach the write it
  is about to read (``Arrivals.check_arrived``; a read before that says so, whether or not
  the bytes happen to be there already);
* the header is there and names the expected producer, chunk and operation number (a
  header from another operation means the ranks' operation sequences have diverged);
* the checksum of the bytes it holds equals the producer's;
* the producer's ``scale_inv`` has the same bit pattern as the one the consumer is about
  to dequantize with. TE's Userbuffers consumers dequantize every gathered chunk with
  their *own* ``scale_inv``, assuming all ranks' scales agree; when a scale update fired
  on one rank only, the chunk's values come out multiplied by ``s_producer / s_consumer``
  (scales, i.e. ``scale_inv_consumer / scale_inv_producer``), silently.

Modes. ``cheap`` (default): the checksum is the 64-bit wrapping sum of the chunk read as
little-endian 64-bit words (a zero-padded word for the tail), computed with torch on the
``uint8`` view reinterpreted as ``int64``: about 1 ms per 16 MB, order-independent (integer
addition), and it catches every change confined to one 8-byte word, a single corrupted
byte included. It misses changes that cancel in the sum, such as two swapped words.
``full``: the producer also keeps a copy of its chunk in its shadow segment, and consumers
compare byte by byte against it, naming the first differing byte; meant for stress runs.
(All-gathered chunks only: reduce-scatter partials, one per destination, keep the checksum.)
``off``: nothing is recorded or checked, as in TE itself; a stack run this way shows the
silent corruption for other oracles (reference equality) to catch.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Callable

import torch

from harness.errors import HarnessError
from harness.fp8.formats import Fp8Format

HEADER_BYTES = 64
_MAGIC = b"UBCH"
_VERSION = 1
# magic, version, fmt code, producer, chunk, seq, nbytes, checksum, has_scale, scale_inv bits
_HEADER = struct.Struct("<4sHHiiqqQiI")
_FMT_CODE = {None: 0, Fp8Format.E4M3: 1, Fp8Format.E5M2: 2}
_CODE_FMT = {code: fmt for fmt, code in _FMT_CODE.items()}
_MASK64 = (1 << 64) - 1


class IntegrityMode(enum.Enum):
    CHEAP = "cheap"    # checksum + scale_inv check on every chunk (the default)
    FULL = "full"      # byte-by-byte comparison with the producer's copy + scale_inv check
    OFF = "off"        # no check: consumers read whatever is there, as TE does

    @classmethod
    def parse(cls, value: "IntegrityMode | str") -> "IntegrityMode":
        if isinstance(value, cls):
            return value
        for member in cls:
            if member.value == str(value).lower():
                return member
        raise HarnessError(f"integrity mode {value!r} is not one of: cheap, full, off")


class BufferIntegrityError(HarnessError):
    """A consumer's chunk is not what its producer wrote, or was cast with another scale.

    Attributes name the communicator, operation, chunk, producer and consumer ranks, the
    problem, and for a scale mismatch both ``scale_inv`` values with their bit patterns and
    ``ratio = s_producer / s_consumer``, the factor the consumer's values are off by.
    Pickles with all its fields (it crosses process boundaries).
    """

    def __init__(self, message: str, *, communicator: str = "", op: str = "", chunk: int = -1,
                 producer: int = -1, consumer: int = -1, problem: str = "",
                 producer_scale_inv: float | None = None, consumer_scale_inv: float | None = None,
                 producer_scale_inv_bits: int | None = None, consumer_scale_inv_bits: int | None = None,
                 ratio: float | None = None):
        super().__init__(message)
        self.communicator = communicator
        self.op = op
        self.chunk = chunk
        self.producer = producer
        self.consumer = consumer
        self.problem = problem
        self.producer_scale_inv = producer_scale_inv
        self.consumer_scale_inv = consumer_scale_inv
        self.producer_scale_inv_bits = producer_scale_inv_bits
        self.consumer_scale_inv_bits = consumer_scale_inv_bits
        self.ratio = ratio

    def __reduce__(self):
        fields = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        return (_rebuild_integrity_error, (self.args[0], fields))


def _rebuild_integrity_error(message: str, fields: dict) -> BufferIntegrityError:
    return BufferIntegrityError(message, **fields)


@dataclasses.dataclass(frozen=True)
class ChunkHeader:
    """What the producer recorded about one chunk."""

    producer: int
    chunk: int
    seq: int
    nbytes: int
    checksum: int
    fmt: Fp8Format | None = None
    scale_inv_bits: int | None = None

    def pack_into(self, buffer: memoryview, offset: int) -> None:
        has_scale = self.scale_inv_bits is not None
        _HEADER.pack_into(buffer, offset, _MAGIC, _VERSION, _FMT_CODE[self.fmt], self.producer,
                          self.chunk, self.seq, self.nbytes, self.checksum & _MASK64,
                          int(has_scale), (self.scale_inv_bits or 0) & 0xFFFFFFFF)

    @classmethod
    def unpack_from(cls, buffer: memoryview, offset: int) -> "ChunkHeader | None":
        """The header at ``offset``, or None if there is none (wrong magic or version)."""
        magic, version, fmt, producer, chunk, seq, nbytes, checksum, has_scale, bits = \
            _HEADER.unpack_from(buffer, offset)
        if magic != _MAGIC or version != _VERSION or fmt not in _CODE_FMT:
            return None
        return cls(producer, chunk, seq, nbytes, checksum, _CODE_FMT[fmt], bits if has_scale else None)


def clear_header(buffer: memoryview, offset: int) -> None:
    buffer[offset:offset + HEADER_BYTES] = bytes(HEADER_BYTES)


def float32_bits(value: torch.Tensor) -> int:
    """The IEEE bit pattern of a one-element float32 tensor, as an unsigned int."""
    t = value.detach().reshape(()).to(torch.float32)
    return int(t.view(torch.int32).item()) & 0xFFFFFFFF


def bits_to_float32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def checksum(data: torch.Tensor) -> int:
    """64-bit wrapping sum of ``data``'s bytes read as little-endian 64-bit words.

    ``data`` is a ``uint8`` tensor (any shape, contiguous). The trailing ``n % 8`` bytes form
    one zero-padded word. Integer addition is associative, so the value does not depend on
    how torch splits the reduction.
    """
    flat = data.reshape(-1)
    if flat.dtype != torch.uint8:
        raise HarnessError(f"checksum needs uint8 bytes, got {flat.dtype}")
    n = flat.numel()
    whole = n - n % 8
    total = 0
    if whole:
        body = flat[:whole]
        if body.storage_offset() % 8:
            body = body.clone()              # int64 reinterpretation needs 8-byte alignment
        total = int(body.view(torch.int64).sum().item())
    if n % 8:
        total += int.from_bytes(bytes(flat[whole:].tolist()), "little")
    return total & _MASK64


def _scale_problem(header: ChunkHeader, consumer_scale_inv: torch.Tensor):
    consumer_bits = float32_bits(consumer_scale_inv)
    if header.scale_inv_bits is None:
        return None
    if header.scale_inv_bits == consumer_bits:
        return None
    s_prod = bits_to_float32(header.scale_inv_bits)
    s_cons = bits_to_float32(consumer_bits)
    # scales are reciprocals of scale_invs: s_producer / s_consumer = scale_inv_c / scale_inv_p
    ratio = (s_cons / s_prod) if s_prod != 0 else float("inf")
    text = (f"scale mismatch: the producer cast with scale_inv {s_prod!r} (0x{header.scale_inv_bits:08x}), "
            f"the consumer dequantizes with scale_inv {s_cons!r} (0x{consumer_bits:08x}); "
            f"values read are off by s_producer/s_consumer = {ratio!r}")
    return text, s_prod, s_cons, header.scale_inv_bits, consumer_bits, ratio


def verify_chunk(
    *,
    communicator: str,
    op: str,
    chunk: int,
    producer: int,
    consumer: int,
    seq: int,
    header: ChunkHeader | None,
    data: torch.Tensor,
    consumer_scale_inv: torch.Tensor | None = None,
    fmt: Fp8Format | None = None,
    shadow: torch.Tensor | None = None,
) -> None:
    """Check one chunk before use; raise :class:`BufferIntegrityError` naming every problem.

    ``data`` is the consumer's copy (uint8 bytes); ``shadow`` the producer's recorded copy
    (full mode) or None; ``consumer_scale_inv`` the scale_inv the consumer will dequantize
    with, or None for chunks that are not FP8 (reduce-scatter partials).
    """
    problems: list[str] = []
    scale = None
    flat = data.reshape(-1)
    if header is None:
        problems.append("no chunk header: the producer never wrote this slot, or it was overwritten")
    else:
        if (header.producer, header.chunk, header.seq) != (producer, chunk, seq):
            problems.append(
                f"header names producer {header.producer}, chunk {header.chunk}, operation #{header.seq}; "
                f"expected producer {producer}, chunk {chunk}, operation #{seq} "
                f"(the ranks' operation sequences have diverged)")
        if header.nbytes != flat.numel():
            problems.append(f"producer wrote {header.nbytes} bytes, consumer reads {flat.numel()}")
        elif shadow is not None:
            ref = shadow.reshape(-1)[:flat.numel()]
            if not torch.equal(ref, flat):
                diff = (ref != flat).nonzero()
                first = int(diff[0])
                problems.append(
                    f"bytes differ from the producer's copy: byte {first} is 0x{int(flat[first]):02x}, "
                    f"the producer wrote 0x{int(ref[first]):02x}; {diff.numel()} byte(s) differ")
        else:
            seen = checksum(flat)
            if seen != header.checksum:
                problems.append(
                    f"bytes differ from what the producer wrote: checksum 0x{seen:016x} over "
                    f"{flat.numel()} bytes, the producer recorded 0x{header.checksum:016x}")
        if consumer_scale_inv is not None:
            if fmt is not None and header.fmt is not None and header.fmt is not fmt:
                problems.append(f"format mismatch: producer cast to {header.fmt.value}, "
                                f"consumer reads {fmt.value}")
            if header.scale_inv_bits is None:
                problems.append("the producer recorded no scale_inv for an FP8 chunk")
            scale = _scale_problem(header, consumer_scale_inv)
            if scale is not None:
                problems.append(scale[0])
    if not problems:
        return
    message = (f"userbuffers {communicator!r} {op}: chunk {chunk} written by rank {producer}, "
               f"read by rank {consumer}: " + "; ".join(problems))
    fields = dict(communicator=communicator, op=op, chunk=chunk, producer=producer,
                  consumer=consumer, problem="; ".join(problems))
    if scale is not None:
        _, s_prod, s_cons, b_prod, b_cons, ratio = scale
        fields.update(producer_scale_inv=s_prod, consumer_scale_inv=s_cons,
                      producer_scale_inv_bits=b_prod, consumer_scale_inv_bits=b_cons, ratio=ratio)
    raise BufferIntegrityError(message, **fields)


def landing_problem(header: ChunkHeader | None, seq: int, data_of: Callable[[int], torch.Tensor],
                    producer: int | None = None, chunk: int | None = None) -> str | None:
    """What keeps a slot from holding operation ``seq``'s chunk, or None once it does.

    ``header`` is the slot's header as it is now; ``data_of(n)`` the slot's first ``n`` bytes.
    The chunk has landed when the header names operation ``seq`` (and ``producer`` and
    ``chunk``, where given) and the bytes have the checksum it records. Called by a producer
    when it raises the counter that announces the chunk (the payload must be there already)
    and by a consumer whose read failed verification (did the write land after the read?).
    """
    if header is None:
        return "no chunk header in the slot yet"
    if header.seq != seq or (producer is not None and header.producer != producer) \
            or (chunk is not None and header.chunk != chunk):
        return (f"the slot's header names producer {header.producer}, chunk {header.chunk}, operation "
                f"#{header.seq}, not operation #{seq}'s chunk")
    try:
        data = data_of(header.nbytes)
    except Exception as exc:          # a header whose size does not fit the slot
        return f"the slot's header gives {header.nbytes} bytes, which the slot cannot hold ({exc})"
    seen = checksum(data)
    if seen != header.checksum:
        return (f"the slot's {header.nbytes} bytes have checksum 0x{seen:016x}, the header records "
                f"0x{header.checksum:016x}")
    return None


def make_header(*, producer: int, chunk: int, seq: int, data: torch.Tensor,
                fmt: Fp8Format | None = None, scale_inv: torch.Tensor | None = None) -> ChunkHeader:
    """The producer's record of ``data`` (the bytes as they now sit in its buffer)."""
    flat = data.reshape(-1)
    return ChunkHeader(producer=producer, chunk=chunk, seq=seq, nbytes=flat.numel(),
                       checksum=checksum(flat), fmt=fmt,
                       scale_inv_bits=None if scale_inv is None else float32_bits(scale_inv))
