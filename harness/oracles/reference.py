"""Reference equality: every role's meta and bytes, and what each step computed, equal the reference
bit for bit.

Two comparisons, both called by the case executor after every step: :func:`compare_states`
(the FP8 state the stack's snapshot shows) and :func:`compare_outputs` (what ``forward_backward``
returned: the output, the input gradient and the weight gradients). The second sees what the
first cannot: a GEMM that used a wrong scale_inv or stale bytes changes its result but not the
FP8 state it read.
"""

from __future__ import annotations

import torch

from harness.fp8.bits import bit_view, first_bit_mismatch
from harness.fp8.state import RoleState

STEP_FIELDS = ("amax_history", "scale", "scale_inv", "fp8_bytes", "fp8_scale_inv")
# After the last optimizer step only what the weight *is* is compared: the meta's scale between
# an optimizer step and the next forward legitimately depends on when the weight amax is reduced.
FINAL_FIELDS = ("fp8_bytes", "fp8_scale_inv")


def compare_states(expected: dict[str, RoleState], actual: dict[str, RoleState], fields=STEP_FIELDS) -> str | None:
    """None when equal; else a one-line description of the first differing element."""
    for key in sorted(expected):
        if key not in actual:
            return f"{key}: missing from the stack's snapshot (it has {', '.join(sorted(actual)) or 'nothing'})"
        exp, act = expected[key], actual[key]
        for field in fields:
            e, a = getattr(exp, field), getattr(act, field)
            if e is None and a is None:
                continue
            if e is None or a is None:
                return f"{key}.{field}: expected {'nothing' if e is None else 'a tensor'}, got {'nothing' if a is None else 'a tensor'}"
            if a.shape != e.shape and a.numel() == e.numel():
                a = a.reshape(e.shape)          # (a reshape to its own shape would be a no-op view)
            if _same_bits(e, a):
                continue
            mismatch = first_bit_mismatch(e, a, f"{key}.{field}")
            if mismatch is not None:
                return str(mismatch)
    return None


def step_mismatch(expected, step: int, snapshot: dict, returned: dict) -> str | None:
    """Step ``step`` of one model against its :class:`ExpectedModel`: the snapshot's FP8 state,
    then what ``forward_backward`` returned. None when both are equal bit for bit."""
    return compare_states(expected.steps[step], snapshot) or compare_outputs(expected.step_outputs(step), returned)


def final_mismatch(expected, weights: dict) -> str | None:
    """What the weights are after the model's last optimizer step (:data:`FINAL_FIELDS`)."""
    mismatch = compare_states(expected.final, weights, FINAL_FIELDS)
    return f"after the last step: {mismatch}" if mismatch else None


def compared_names(expected, step: int | None) -> set[str]:
    """The names of what :func:`step_mismatch` compares at ``step`` (``None``: what
    :func:`final_mismatch` compares after the last step), as a rank records them
    (:class:`harness.oracles.recorded.StepRecorder`): ``key|field`` for a role's field the
    expectation holds, the name of each returned tensor it holds. The executor marks the tensors
    of a report with them; anything else the stack shows is not compared."""
    if step is None:
        states, fields, outputs = expected.final, FINAL_FIELDS, {}
    else:
        states, fields, outputs = expected.steps[step], STEP_FIELDS, expected.step_outputs(step)
    names = {f"{key}|{field}" for key, st in states.items() for field in fields if getattr(st, field) is not None}
    return names | set(outputs)


OUTPUT_ORDER = ("output", "grad_input")   # then layer{i}.weight_grad, by layer


def output_order(named) -> list[str]:
    """The names of what a step returned, in the order they are compared and recorded: the
    output, the input gradient, then the rest (the weight gradients) by name."""
    return [n for n in OUTPUT_ORDER if n in named] + sorted(n for n in named if n not in OUTPUT_ORDER)


def compare_outputs(expected: dict[str, torch.Tensor], returned: dict[str, torch.Tensor]) -> str | None:
    """None when every tensor the stack returned equals the expected one bit for bit; else the first
    difference: name, index, both values and both bit patterns.

    ``expected``: :meth:`ExpectedModel.step_outputs`; ``returned``: :meth:`StepOutputs.named`. Only
    names present in both are compared: a stack returns what it can (the output alone, say), and
    a reference leaves out what it cannot reproduce bit for bit (GEMMs on tensor cores).
    """
    for name in output_order(expected):
        if name not in returned:
            continue
        e, a = expected[name], returned[name].detach()
        if _same_bits(e, a):
            continue
        mismatch = first_bit_mismatch(e, a, name)
        if mismatch is not None:
            return str(mismatch)
    return None


def _same_bits(e, a) -> bool:
    """Fast path: identical bit patterns (one comparison, no index search); False means "look closer"."""
    if e.dtype != a.dtype or e.shape != a.shape:
        return False
    try:
        return torch.equal(bit_view(e), bit_view(a))
    except KeyError:      # a dtype without an integer view: first_bit_mismatch reports it
        return False
