"""Where the TE stack lets the harness force id reuse: right before TE allocates an FP8 weight's ``_data``.

The pre-fix hook keyed on ``id(weight._data)``. ``te.Linear`` allocates that tensor inside its
construction cast (``Float8Quantizer.quantize_impl``, from ``reset_parameters``), after Python
work of its own that allocates objects of a tensor's size class. So the reuse point cannot sit
in our ``init_method``: a temporary of TE's would take the released address first. While a
model is built, :func:`reuse_point_before_weight_casts` runs the reuse point at the start of
``quantize_impl`` itself, the closest Python gets to the allocation; it changes nothing else
and is undone when the build ends. Whether each forced reuse landed on ``_data`` is not taken
on trust: the harness counts reuse events on the tensors :meth:`TEStack.reuse_targets` returns.
"""

from __future__ import annotations

import contextlib

from harness.idreuse import reuse_point


@contextlib.contextmanager
def reuse_point_before_weight_casts(quantizer_cls):
    """For the duration: every construction cast of ``quantizer_cls`` starts with a reuse point."""
    original = quantizer_cls.__dict__.get("quantize_impl")
    if original is None:           # a TE whose quantizer keeps the method elsewhere: no reuse point
        yield
        return

    def quantize_impl(self, tensor):
        reuse_point("te_weight_data")
        return original(self, tensor)

    quantizer_cls.quantize_impl = quantize_impl
    try:
        yield
    finally:
        quantizer_cls.quantize_impl = original
