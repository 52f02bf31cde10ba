"""Short, exact-or-hashed names for a tensor's bits, as reports carry them.

A rank hashes every tensor it records once (SHA-1 of its bytes, :class:`~harness.oracles.recorded.StepRecorder`);
a report keeps of each tensor a *token*:

* a tensor of one element: ``=`` and its bit pattern in hex (``=43e00000`` is float32 448.0),
  shorter than a digest and exact, so that a diff of two reports can show both values;
* any other tensor: the first :data:`DIGEST_HEX` hex digits of its SHA-1 (48 bits: two
  different tensors share a token with probability 2**-48).

Called by the recorder (:func:`token`) and by ``python -m harness diff`` (:func:`value_of`).
"""

from __future__ import annotations

import hashlib

import torch

from harness.fp8.bits import bit_view

DIGEST_HEX = 12
EXACT = "="


def flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in memory order, one dimension, contiguous, on the CPU (no copy where
    the tensor already is that)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    one = t.reshape(-1)
    if one.numel() and one.stride(0) != 1:      # a strided view (a size-1 dim keeps its stride)
        one = torch.empty(one.shape, dtype=one.dtype).copy_(one)
    return one.view(torch.uint8)


def sha1_of(raw: torch.Tensor) -> bytes:
    """SHA-1 of ``raw`` (:func:`flat_bytes`), read in place."""
    return hashlib.sha1(raw.numpy()).digest()


def token(t: torch.Tensor, sha1: bytes) -> str:
    """What a report keeps of ``t``, whose bytes hash to ``sha1``: its bit pattern when it has
    one element (``=`` + hex, as :func:`harness.fp8.bits.bit_view` reads it), else the start of
    its SHA-1."""
    if t.numel() == 1:
        try:
            bits = int(bit_view(t.detach().cpu().reshape(())).item())
        except KeyError:                        # a dtype without an integer view: hashed
            return sha1.hex()[:DIGEST_HEX]
        width = t.element_size() * 8
        return EXACT + format(bits & ((1 << width) - 1), f"0{width // 4}x")
    return sha1.hex()[:DIGEST_HEX]


_DTYPES = {str(d).replace("torch.", ""): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
                               torch.int8, torch.int32, torch.int64, torch.float8_e4m3fn, torch.float8_e5m2)}


def value_of(tok: str, dtype: str) -> str | None:
    """The value an exact token (``=`` + bits) of a ``dtype`` tensor stands for, as Python prints
    it (``448.0``); None for a hashed token or a dtype this cannot read. ``dtype``: ``float32``
    or ``torch.float32``."""
    dt = _DTYPES.get(dtype.replace("torch.", ""))
    if not tok.startswith(EXACT) or dt is None:
        return None
    try:
        bits = int(tok[len(EXACT):], 16)
    except ValueError:
        return None
    width = dt.itemsize * 8
    if bits >= 1 << width:
        return None
    raw = torch.tensor(list(bits.to_bytes(dt.itemsize, "little")), dtype=torch.uint8)
    value = raw.view(dt)[0]
    if dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        value = value.float()
    return repr(value.item())
