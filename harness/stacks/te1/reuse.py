"""Where the TE 1.x stack lets the harness force id reuse: right before TE allocates an FP8 weight's ``_data``.

TE 1.12 keyed its weight maps on ``id(weight._data)``. A ``te.Linear`` made under
``fp8_model_init`` wraps its initialised weight in ``reset_parameters`` with
``Float8Tensor.to_float8``, which runs ``_ToFloat8Func.forward``; its first allocation after
checking dtype and device is ``data = torch.empty(tensor.size(), dtype=torch.uint8, ...)``, the
tensor whose id is keyed (read at tags v1.12 and v1.13; v1.13 adds a ``data`` argument and
allocates only when it is None, which ``reset_parameters`` never passes). While a model is built,
:func:`reuse_point_before_weight_data` runs the reuse point at the start of that ``forward``, the
closest Python gets to the allocation, and puts the original back when the build ends. Whether
each forced reuse landed is counted by the harness on :meth:`TE1Stack.reuse_targets`.
"""

from __future__ import annotations

import contextlib

from harness.idreuse import reuse_point


@contextlib.contextmanager
def reuse_point_before_weight_data(to_float8_func):
    """For the duration: every ``to_float8_func.forward`` (TE's ``_ToFloat8Func``) starts with a reuse point."""
    original = to_float8_func.__dict__.get("forward")
    if original is None:           # a TE that keeps the method elsewhere: no reuse point
        yield
        return
    function = original.__func__ if isinstance(original, staticmethod) else original

    def forward(*args, **kwargs):
        reuse_point("te_weight_data")
        return function(*args, **kwargs)

    to_float8_func.forward = staticmethod(forward)
    try:
        yield
    finally:
        to_float8_func.forward = original
