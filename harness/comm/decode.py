"""Exact, fast FP8 decode: ``dequantize(q, scale_inv, fmt)`` through a lookup table.

On CPU, torch's ``float8 -> float32`` conversion is scalar (about 5 ns per element here),
which would make the "GEMM" side of the emulated overlap mostly conversion. The decode
only ever sees 256 distinct byte values, so we evaluate the reference formula
``float32(q) * scale_inv`` once per byte value (with :func:`harness.fp8.dequantize`
itself, so the products are the same IEEE multiplications), and then gather: two bytes at
a time through a 65,536-entry table of float pairs (512 KiB, stays in L2), which halves
the number of gathers. Results are bit-identical to ``dequantize`` for every byte and
every scale_inv, NaN payloads included, because each output element *is* one of the
table's products; the tests check this exhaustively.
"""

from __future__ import annotations

import sys

import torch

from harness.fp8.cast import dequantize
from harness.fp8.formats import Fp8Format


class PairTable:
    """The decode table for one (format, scale_inv bit pattern)."""

    def __init__(self, fmt: Fp8Format, scale_inv: torch.Tensor):
        self.fmt = fmt
        self.scale_inv = scale_inv.detach().reshape(()).to(torch.float32).clone()
        self.singles = dequantize(torch.arange(256, dtype=torch.int32).to(torch.uint8), self.scale_inv, fmt)
        codes = torch.arange(65536, dtype=torch.int64)
        pairs = torch.empty(65536, 2, dtype=torch.float32)
        # little-endian: the first byte of a pair is the low byte of the uint16
        pairs[:, 0] = self.singles[codes & 0xFF]
        pairs[:, 1] = self.singles[codes >> 8]
        self.pairs = pairs.view(torch.int64).reshape(-1)    # one 8-byte entry per pair

    def decode_into(self, data: torch.Tensor, out: torch.Tensor, index_workspace: torch.Tensor | None = None) -> torch.Tensor:
        """Decode ``data`` (uint8, any shape) into ``out`` (float32, same number of elements).

        ``index_workspace`` (int32, at least ``numel // 2`` elements) avoids a fresh
        allocation (and its page faults) per call.
        """
        flat = data.reshape(-1)
        n = flat.numel()
        dst = out.reshape(-1)
        if dst.numel() != n or dst.dtype != torch.float32:
            raise ValueError(f"decode output must be float32 with {n} elements, got {dst.dtype}[{dst.numel()}]")
        if (n % 2 or flat.storage_offset() % 2 or dst.storage_offset() % 2 or not dst.is_contiguous()
                or sys.byteorder != "little"):
            dst.copy_(dequantize(flat, self.scale_inv, self.fmt))
            return out
        npairs = n // 2
        if index_workspace is None or index_workspace.numel() < npairs:
            index_workspace = torch.empty(npairs, dtype=torch.int32)
        idx = index_workspace[:npairs]
        idx.copy_(flat.view(torch.uint16))          # zero-extends each byte pair to an index
        torch.index_select(self.pairs, 0, idx, out=dst.view(torch.int64))
        return out


class DecodeCache:
    """A few decode tables keyed by (format, scale_inv bits): scales change rarely."""

    def __init__(self, capacity: int = 4):
        self.capacity = capacity
        self._tables: dict[tuple[Fp8Format, int], PairTable] = {}

    def table(self, fmt: Fp8Format, scale_inv: torch.Tensor) -> PairTable:
        key = (fmt, int(scale_inv.detach().reshape(()).to(torch.float32).view(torch.int32).item()))
        table = self._tables.pop(key, None)
        if table is None:
            table = PairTable(fmt, scale_inv)
        self._tables[key] = table                    # most recently used last
        while len(self._tables) > self.capacity:
            self._tables.pop(next(iter(self._tables)))
        return table

    def clear(self) -> None:
        self._tables.clear()


def decode_fp8(data: torch.Tensor, scale_inv: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """``dequantize(data, scale_inv, fmt)``, bit for bit, through the pair table."""
    out = torch.empty(data.shape, dtype=torch.float32)
    PairTable(fmt, scale_inv).decode_into(data, out)
    return out
