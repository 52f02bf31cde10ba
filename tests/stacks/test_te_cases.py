"""The TE adapter's plain-Python parts: its catalogue and what it compares (no TE, no GPU needed)."""

from __future__ import annotations

import pytest

from harness.case.catalog import builtin_cases as catalogue_cases
from harness.case.catalog import userbuffers_cases
from harness.errors import SetupError
from harness.stacks.te import availability
from harness.stacks.te import cases as te_cases
from harness.stacks.te_common.compared import expected_model


def test_catalogue_fits_te_gemm_shapes_and_keeps_names():
    names = {c.name for c in catalogue_cases()}
    for case in te_cases.builtin_cases():
        assert case.name in names
        assert te_cases.shape_reason(case.model.dims, case.batch) is None, case.name
        assert te_cases.decline_reason(case.model) is None, case.name


def test_declined_cases_are_named_with_a_reason():
    declined = te_cases.declined_cases()
    assert set(declined) == {"delayed/te-default-init-cast", "delayed/e5m2-h16", "repro/reference",
                             "reuse/init-cast-symmetric", "reuse/init-cast-asymmetric"}
    assert all(reason.startswith("--sut te") for reason in declined.values())
    kept = {c.name for c in te_cases.builtin_cases()}
    assert kept.isdisjoint(declined)
    # The emulated Userbuffers family is not TE's: its TE counterpart has shapes of its own.
    emulated_ub = {c.name for c in userbuffers_cases()}
    assert kept | set(declined) == {c.name for c in catalogue_cases()} - emulated_ub


def test_expected_model_keeps_only_what_te_must_reproduce():
    case = next(c for c in te_cases.builtin_cases() if c.name == "delayed/deep-narrow")
    n_layers = len(case.model.dims) - 1
    expected = expected_model(case, 0, 2, 1, 0)
    assert expected.final == {}
    weights = {f"layer{i}.weight" for i in range(n_layers)}
    assert set(expected.steps[0]) == {"layer0.input", f"layer{n_layers - 1}.grad_output"} | weights
    for states in expected.steps[1:]:
        assert set(states) == {"layer0.input", f"layer{n_layers - 1}.grad_output"}
    for states in expected.steps:
        for key, state in states.items():
            assert state.scale_inv is None, key
            assert (state.fp8_bytes is not None) == key.endswith(".weight"), key


@pytest.mark.skipif(availability.missing_reason() is None, reason="Transformer Engine and a CUDA device are here")
def test_load_says_in_one_line_what_is_missing():
    from harness.stacks.te.stack import load

    with pytest.raises(SetupError) as info:
        load()
    assert "\n" not in str(info.value)
    assert "transformer_engine" in str(info.value) or "CUDA" in str(info.value)
