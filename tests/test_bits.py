"""first_bit_mismatch: bit patterns, not values; the first differing element, fully described."""

from __future__ import annotations

import pytest
import torch

from harness.fp8.bits import first_bit_mismatch


def f32_from_bits(bits: int) -> torch.Tensor:
    """A 0-dim float32 tensor with exactly this bit pattern (built through an int32 view, no rounding)."""
    signed = bits - (1 << 32) if bits & 0x80000000 else bits
    return torch.tensor([signed], dtype=torch.int32).view(torch.float32).reshape(())


def f32_tensor_from_bits(rows: list[list[int]]) -> torch.Tensor:
    flat = [b - (1 << 32) if b & 0x80000000 else b for row in rows for b in row]
    return torch.tensor(flat, dtype=torch.int32).view(torch.float32).reshape(len(rows), len(rows[0]))


ONE, TWO, THREE = 0x3F800000, 0x40000000, 0x40400000          # 1.0, 2.0, 3.0
NAN, NEG_NAN, NAN_PAYLOAD = 0x7FC00000, 0xFFC00000, 0x7FC00001
POS_ZERO, NEG_ZERO = 0x00000000, 0x80000000


def test_identical_tensors_give_none():
    a = f32_tensor_from_bits([[ONE, TWO, THREE], [NAN, NEG_ZERO, 0x00000001]])
    assert first_bit_mismatch(a, a.clone()) is None


def test_first_element_index_values_and_bits_in_row_major_order():
    expected = f32_tensor_from_bits([[ONE, TWO, THREE], [ONE, TWO, THREE]])
    # Elements (1, 0) and (1, 2) differ; (1, 0) comes first in row-major order.
    actual = f32_tensor_from_bits([[ONE, TWO, THREE], [TWO, TWO, ONE]])
    m = first_bit_mismatch(expected, actual, "layer0.input.scale")
    assert m is not None
    assert m.index == (1, 0)
    assert m.expected == repr(1.0) and m.actual == repr(2.0)
    assert m.expected_bits == "3f800000" and m.actual_bits == "40000000"
    assert m.count == 2
    text = str(m)
    assert "layer0.input.scale[1, 0]" in text
    assert "1.0 (0x3f800000)" in text and "2.0 (0x40000000)" in text


def test_values_of_a_one_ulp_difference_are_both_shown():
    # 1.0 and the next float32 up, 1 + 2**-23: values differ only in the last bit.
    expected, actual = f32_from_bits(ONE), f32_from_bits(ONE + 1)
    m = first_bit_mismatch(expected, actual, "scale")
    assert m is not None and m.index == ()
    assert m.expected == repr(1.0) and m.actual == repr(1.0 + 2.0 ** -23)
    assert (m.expected_bits, m.actual_bits) == ("3f800000", "3f800001")
    assert "scale[]" in str(m)


def test_nan_equals_nan_of_the_same_pattern():
    a = f32_tensor_from_bits([[NAN, NEG_NAN, NAN_PAYLOAD]])
    b = f32_tensor_from_bits([[NAN, NEG_NAN, NAN_PAYLOAD]])
    assert torch.isnan(a).all()            # by value nothing would be equal
    assert first_bit_mismatch(a, b) is None


@pytest.mark.parametrize("left, right", [(NAN, NEG_NAN), (NAN, NAN_PAYLOAD)])
def test_nans_of_different_patterns_differ(left, right):
    m = first_bit_mismatch(f32_from_bits(left), f32_from_bits(right))
    assert m is not None
    assert (m.expected_bits, m.actual_bits) == (f"{left:08x}", f"{right:08x}")


def test_minus_zero_differs_from_plus_zero():
    a = f32_tensor_from_bits([[ONE, POS_ZERO]])
    b = f32_tensor_from_bits([[ONE, NEG_ZERO]])
    assert bool((a == b).all())            # equal by value
    m = first_bit_mismatch(a, b, "h")
    assert m is not None and m.index == (0, 1)
    assert (m.expected_bits, m.actual_bits) == ("00000000", "80000000")
    assert m.expected == repr(0.0) and m.actual == repr(-0.0)


def test_uint8_bytes_report_integer_values_and_two_hex_digits():
    expected = torch.tensor([[0x10, 0x7E], [0x80, 0x01]], dtype=torch.uint8)
    actual = torch.tensor([[0x10, 0x7E], [0x81, 0x01]], dtype=torch.uint8)
    m = first_bit_mismatch(expected, actual, "layer1.weight.fp8_bytes")
    assert m is not None and m.index == (1, 0)
    assert (m.expected, m.actual) == ("128", "129")
    assert (m.expected_bits, m.actual_bits) == ("80", "81")
    assert "layer1.weight.fp8_bytes[1, 0]: expected 128 (0x80), got 129 (0x81)" in str(m)


def test_fp8_dtypes_report_decoded_values():
    # E4M3 bytes 0x38 = 1.0 (exponent 7, bias 7) and 0x40 = 2.0.
    expected = torch.tensor([0x38], dtype=torch.uint8).view(torch.float8_e4m3fn)
    actual = torch.tensor([0x40], dtype=torch.uint8).view(torch.float8_e4m3fn)
    m = first_bit_mismatch(expected, actual)
    assert m is not None and m.index == (0,)
    assert (m.expected, m.actual) == (repr(1.0), repr(2.0))
    assert (m.expected_bits, m.actual_bits) == ("38", "40")


def test_float64_uses_sixteen_hex_digits():
    m = first_bit_mismatch(torch.tensor([1.0], dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64))
    assert m is not None
    assert (m.expected_bits, m.actual_bits) == ("3ff0000000000000", "bff0000000000000")


def test_shape_mismatch_is_reported():
    m = first_bit_mismatch(torch.zeros(2, 3), torch.zeros(3, 2), "layer0.input.amax_history")
    assert m is not None
    assert m.index == ()
    assert m.expected == "torch.float32[2, 3]" and m.actual == "torch.float32[3, 2]"
    assert str(m) == "layer0.input.amax_history: expected torch.float32[2, 3], got torch.float32[3, 2]"


def test_dtype_mismatch_is_reported_even_with_equal_bits():
    a = torch.zeros(4, dtype=torch.int32)
    b = a.view(torch.float32)              # same bytes, other dtype
    m = first_bit_mismatch(a, b, "x")
    assert m is not None
    assert str(m) == "x: expected torch.int32[4], got torch.float32[4]"


def test_number_of_elements_mismatch_same_dtype():
    m = first_bit_mismatch(torch.zeros(16), torch.zeros(15), "h")
    assert m is not None and str(m) == "h: expected torch.float32[16], got torch.float32[15]"
