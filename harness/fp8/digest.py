"""Short, exact-or-hashed names for a tensor's bits, as reports carry them.

A rank hashes every tensor it records once (SHA-1 of its bytes, :class:`~harness.oracles.recorded.StepRecorder`);
a report keeps of each tensor a *token*:

* a tensor of one element: ``=`` and its bit pattern in hex (``=43e00000`` is float32 448.0),
  shorter than a digest and exact, so that a diff of two reports can show both values;
* any other tensor: the first :data:`DIGEST_HEX` hex digits of its SHA-1 (48 bits: two
  different tensors share a token with probability 2**-48).

Called by the recorder (:func:`token`); ``python -m harness diff`` reads an exact token back
without torch (:mod:`harness.report.bitvalues`).
"""

from __future__ import annotations

import hashlib

import torch

from harness.fp8.bits import bit_view

DIGEST_HEX = 12
EXACT = "="       # (harness.report.bitvalues reads it back)


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
