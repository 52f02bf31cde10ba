"""Where the TE 1.x stack lets the harness force id reuse: right before TE allocates an FP8 weight's ``_data``.

TE 1.12 keyed its weight maps on ``id(weight._data)``. A ``te.Linear`` made under
``fp8_model_init`` wraps its initialised weight in ``reset_parameters`` with
``Float8Tensor.to_float8``, which runs ``_ToFloat8Func.forward``; its first allocation after
checking dtype and device is ``data = torch.empty(tensor.size(), dtype=torch.uint8, ...)``, the
tensor whose id is keyed (read at tags v1.12 and v1.13; v1.13 adds a ``data`` argument and
allocates only when it is None, which ``reset_parameters`` never passes). Two things of a
tensor's size class (64 bytes with the GC header, torch 2.13) come between the start of
``forward`` and that allocation: ``tensor.size()``, a ``torch.Size``, and, inside
``torch.empty``, the list torch's argument parser copies a ``torch.Size`` into (a tuple
subclass, so it is not used as it is); either takes the released block first (measured on the
CPU: a tensor freed right before ``torch.empty(size)`` had its id taken 0 times in 50 with a
``torch.Size``, 50 in 50 with a plain tuple of the same sizes). So while a model is built,
:func:`reuse_point_before_weight_data` makes the first ``torch.empty`` call inside ``forward``
turn a ``torch.Size`` argument into a plain tuple (the same sizes: nothing else changes), then
run the reuse point, then allocate; ``torch.empty`` and ``forward`` are put back when the call
and the build end. Whether each forced reuse landed is counted by the harness on
:meth:`TE1Stack.reuse_targets`.
"""

from __future__ import annotations

import contextlib

import torch

from harness.idreuse import reuse_point

__harness_hidden__ = True     # its wrapper frame is the harness's, never a call site


@contextlib.contextmanager
def reuse_point_before_weight_data(to_float8_func):
    """For the duration: in every ``to_float8_func.forward`` (TE's ``_ToFloat8Func``), the first
    ``torch.empty`` call (the ``_data`` allocation) starts with a reuse point."""
    original = to_float8_func.__dict__.get("forward")
    if original is None:           # a TE that keeps the method elsewhere: no reuse point
        yield
        return
    function = original.__func__ if isinstance(original, staticmethod) else original

    def forward(*args, **kwargs):
        real_empty = torch.empty
        pending = [True]

        def empty(*e_args, **e_kwargs):
            if pending:
                pending.clear()
                if e_args and isinstance(e_args[0], torch.Size):
                    e_args = (tuple(e_args[0]),) + e_args[1:]
                reuse_point("te_weight_data")
            return real_empty(*e_args, **e_kwargs)

        torch.empty = empty
        try:
            return function(*args, **kwargs)
        finally:
            torch.empty = real_empty

    to_float8_func.forward = staticmethod(forward)
    try:
        yield
    finally:
        to_float8_func.forward = original
