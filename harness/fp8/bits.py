"""Bitwise comparison: bit patterns, not values (NaN equals the same NaN, -0 differs from +0)."""

from __future__ import annotations

import dataclasses

import torch

_INT_VIEW = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
    torch.uint8: torch.uint8,
    torch.int8: torch.int8,
    torch.int32: torch.int32,
    torch.int64: torch.int64,
}


def bit_view(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as an integer tensor of the same width."""
    t = tensor.detach().contiguous()
    return t.view(_INT_VIEW[t.dtype])


@dataclasses.dataclass(frozen=True)
class BitMismatch:
    """The first element whose bit pattern differs (or a shape/dtype mismatch)."""

    what: str
    index: tuple
    expected: str
    actual: str
    expected_bits: str
    actual_bits: str
    count: int = 1

    def __str__(self) -> str:
        if not self.index and self.expected_bits == "":
            return f"{self.what}: expected {self.expected}, got {self.actual}"
        return (f"{self.what}{list(self.index)}: expected {self.expected} (0x{self.expected_bits}), "
                f"got {self.actual} (0x{self.actual_bits}); {self.count} element(s) differ")


def _hex(value: int, width_bits: int) -> str:
    return format(value & ((1 << width_bits) - 1), f"0{width_bits // 4}x")


def first_bit_mismatch(expected: torch.Tensor, actual: torch.Tensor, what: str = "tensor") -> BitMismatch | None:
    """None when the bit patterns are identical, else the first differing element."""
    if expected.dtype != actual.dtype or tuple(expected.shape) != tuple(actual.shape):
        return BitMismatch(what, (), f"{expected.dtype}{list(expected.shape)}",
                           f"{actual.dtype}{list(actual.shape)}", "", "")
    eb, ab = bit_view(expected).reshape(-1), bit_view(actual).reshape(-1)
    diff = (eb != ab).nonzero()
    if diff.numel() == 0:
        return None
    flat = int(diff[0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(expected.shape))) if expected.dim() else ()
    width = eb.element_size() * 8
    ev = expected.reshape(-1)[flat]
    av = actual.reshape(-1)[flat]
    if ev.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        ev, av = ev.float(), av.float()
    return BitMismatch(what, index, repr(ev.item()), repr(av.item()),
                       _hex(int(eb[flat]), width), _hex(int(ab[flat]), width), int(diff.numel()))
