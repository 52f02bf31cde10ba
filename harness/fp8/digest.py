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


def token(t: torch.Tensor, raw: torch.Tensor, sha1: bytes) -> str:
    """What a report keeps of ``t``, whose bytes are ``raw`` (:func:`flat_bytes`) and hash to
    ``sha1``: its bit pattern when it has one element (``=`` + hex: the element's bytes read as
    one little-endian integer, which is :func:`harness.fp8.bits.bit_view`'s reading on the
    little-endian hosts torch runs on), else the start of its SHA-1. One element costs no torch
    call: the bytes are already at hand."""
    if t.numel() == 1:
        data = raw.numpy().tobytes()
        return EXACT + format(int.from_bytes(data, "little"), f"0{2 * len(data)}x")
    return sha1.hex()[:DIGEST_HEX]
