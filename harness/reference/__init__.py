"""The stateless reference: what every FP8 tensor must hold after every step."""

from harness.reference.delayed import ExpectedModel, expected_model

__all__ = ["ExpectedModel", "expected_model"]
