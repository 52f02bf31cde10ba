"""Stack declarations: validated, read the same way by the runners, stress and the stacks' own builds.

Plain Python: the TE and torchao declarations are data, so nothing here needs TE, a GPU or torchao.
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.case.catalog import all_cases
from harness.case.spec import CaseSpec
from harness.errors import UsageError
from harness.fp8.recipe import DelayedScalingRecipe, Format
from harness.stacks import load_stack
from harness.stacks.capabilities import (UNDECLARED, Capabilities, Construction, capabilities_of, declined_by,
                                         declined_reason)
from harness.stacks.emulated.stack import PATCHED
from harness.stacks.protocol import ModelSpec
from harness.stacks.te import cases as te_cases
from harness.stacks.te.declaration import CAPABILITIES as TE
from harness.stacks.torchao.cases import CAPABILITIES as TORCHAO
from harness.stacks.torchao.cases import builtin_cases as torchao_cases


def _case(batch=16, **model) -> CaseSpec:
    fields = {"dims": (16, 32), "recipe": DelayedScalingRecipe(), **model}
    return CaseSpec(name="probe", model=ModelSpec(**fields), batch=batch)


# --- validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, message", [
    ({"formats": ()}, "formats is empty"),
    ({"formats": ("E4M3", "FP6")}, "'FP6' is not one of"),
    ({"formats": (Format.E4M3, "e4m3")}, "lists a value twice"),
    ({"formats": (3,)}, "formats entry 3 is not one of"),
    ({"constructions": ("copy", "clone")}, "'clone' is not one of"),
    ({"scalings": ("tensorwise", "")}, "non-empty names"),
    ({"scalings": "tensorwise"}, "must be a list"),
    ({"fp8_params": (1, 0)}, "true/false"),
    ({"bias": ()}, "bias is empty"),
    ({"delayed_recipe": "no"}, "delayed_recipe must be true or false"),
    ({"dim_multiple": 0}, "dim_multiple must be an integer >= 1"),
    ({"batch_multiple": 2.5}, "batch_multiple must be an integer >= 1"),
    ({"min_world_size": 2, "max_world_size": 1}, "max_world_size must be an integer >= min_world_size"),
    ({"why": {"colour": "no reason"}}, "why has no check 'colour'"),
    ({"why": {"bias": 3}}, "every why entry must be text"),
    ({"declines": "square layers only"}, "declines must be a function"),
])
def test_a_bad_declaration_is_refused(fields, message):
    with pytest.raises(UsageError, match=message):
        Capabilities(**fields)


def test_declarations_normalise_to_enums_and_stay_frozen():
    caps = Capabilities(formats=["e4m3", "HYBRID"], constructions=["copy"], why={"bias": "none"})
    assert caps.formats == ("E4M3", "HYBRID") and caps.constructions == (Construction.COPY,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.dim_multiple = 2
    with pytest.raises(TypeError):
        caps.why["bias"] = "changed"
    assert hash(caps) == hash(Capabilities(formats=["e4m3", "HYBRID"], constructions=["copy"]))


class _Declares:
    """A user stack with a malformed declaration (only what load_stack looks at)."""

    name = "declares-badly"
    capabilities = {"formats": ["E4M3"]}

    def __getattr__(self, attr):
        return lambda *a, **k: None


BAD_STACK = _Declares()


def test_load_stack_refuses_a_malformed_declaration():
    with pytest.raises(UsageError, match="capabilities must be a harness.stacks.capabilities.Capabilities"):
        load_stack(f"{__name__}:BAD_STACK")


# --- the decision ----------------------------------------------------------------------------------
def test_a_stack_that_declares_nothing_runs_every_case_it_ran_before():
    class Bare:
        name = "bare"

    assert capabilities_of(Bare()) is UNDECLARED
    for case in all_cases():
        assert declined_reason(UNDECLARED, case, 2) is None, case.name
    assert declined_reason(UNDECLARED, _case(scaling="my-own-scaling"), 1) is None


@pytest.mark.parametrize("change, check, why", [
    ({"scaling": "tensorwise"}, "scaling='tensorwise'", "scaling"),
    ({"recipe": DelayedScalingRecipe(fp8_format="E5M2")}, "fp8_format=E5M2", "format"),
    ({"construction": "init_cast"}, "construction='init_cast'", "construction"),
    ({"dims": (16, 24)}, "dims [16, 24]", "dims"),
])
def test_te_declines_what_docs_gpu_md_lists_with_the_reason(change, check, why):
    reason = declined_reason(TE, _case(**change), 2)
    assert reason is not None and reason.startswith(check), reason
    assert reason.endswith(": " + TE.why[why])


def test_te_runs_bias_and_userbuffers_only_together_and_userbuffers_in_its_own_shapes():
    from harness.stacks.te import ub_cases

    assert declined_reason(TE, _case(bias=True), 2) == te_cases.LINEAR_BIAS
    ub = _case(userbuffers=True, bias=True, data_parallel=False, dims=(128, 128), batch=32)
    assert declined_reason(TE, ub, 2) is None
    assert declined_reason(TE, ub, 1) == "userbuffers=true at world size 1: Userbuffers-style tensor parallelism " \
                                         "needs at least 2 ranks"
    narrow = _case(userbuffers=True, data_parallel=False, dims=(16, 32))
    assert declined_reason(TE, narrow, 2) == ub_cases.shape_reason((16, 32), 2, True)
    assert declined_reason(TE, _case(userbuffers=True, tp_layout="diagonal", dims=(128, 128)), 2) == \
        ub_cases.decline_reason(_case(userbuffers=True, tp_layout="diagonal").model)
    for case in ub_cases.builtin_cases():
        assert declined_reason(TE, case, 2) is None, case.name
    for name in ub_cases.declined_cases():
        case = next(c for c in all_cases() if c.name == name)
        assert declined_reason(TE, case, 2) is not None, name


def test_te_declines_a_batch_that_is_not_a_multiple_of_16_and_runs_the_rest():
    assert "batch 8 (a multiple of 16)" in declined_reason(TE, _case(batch=8), 1)
    assert declined_reason(TE, _case(), 1) is None
    assert declined_reason(TE, _case(fp8_params=False, data_parallel=False,
                                     recipe=DelayedScalingRecipe(fp8_format="E4M3", margin=2,
                                                                 amax_history_len=16)), 4) is None


def test_te_build_refuses_what_its_declaration_declines():
    """One place to change: the adapter's build-time refusals are the declaration's reasons."""
    for change in ({"construction": "init_cast"}, {"recipe": DelayedScalingRecipe(fp8_format="E5M2")},
                   {"bias": True}, {"scaling": "tensorwise"}, {"dims": (16, 8)}):
        case = _case(**change)
        with pytest.raises(te_cases.DeclinedCase) as info:
            te_cases.check_model(case.model)
        assert str(info.value) == te_cases.PREFIX + declined_reason(TE, case)
    with pytest.raises(te_cases.DeclinedCase, match="batch 8"):
        te_cases.check_batch((16, 16), 8)
    te_cases.check_model(_case().model)
    te_cases.check_batch((16, 16), 32)


def test_the_te_stack_and_its_catalogue_carry_the_declaration():
    from harness.stacks.te.stack import TEStack     # imports no TE

    assert TEStack().capabilities is TE and TEStack("id-hook").capabilities is TE
    for case in te_cases.builtin_cases():
        assert declined_reason(TE, case, 2) is None, case.name
    for name, reason in te_cases.declined_cases().items():
        assert reason.startswith(te_cases.PREFIX), name


def test_torchao_declares_its_three_recipes_and_its_catalogue_fits():
    assert TORCHAO.scalings == ("tensorwise", "rowwise", "rowwise_with_gw_hp")
    for case in torchao_cases():
        assert declined_reason(TORCHAO, case, 2) is None, case.name
    recipe = DelayedScalingRecipe(reduce_amax=False)
    assert "scaling='delayed'" in declined_reason(TORCHAO, _case(recipe=recipe), 2)
    assert "fp8_params=true" in declined_reason(TORCHAO, _case(recipe=recipe, scaling="rowwise"), 2)
    assert "reduce_amax=true" in declined_reason(TORCHAO, _case(scaling="rowwise", fp8_params=False), 2)
    history = DelayedScalingRecipe(reduce_amax=False, amax_history_len=16)
    assert "amax_history_len=16" in declined_reason(TORCHAO, _case(scaling="rowwise", fp8_params=False,
                                                                   recipe=history), 2)


def test_torchao_build_refuses_what_its_declaration_declines():
    from harness.stacks.torchao.model import check_spec     # plain Python until a model is built

    case = _case(recipe=DelayedScalingRecipe(reduce_amax=False), fp8_params=False)
    with pytest.raises(ValueError) as info:
        check_spec(case.model)
    assert str(info.value).endswith(declined_reason(TORCHAO, case))


def test_world_sizes_and_userbuffers_need_enough_ranks():
    caps = Capabilities(min_world_size=2, max_world_size=4, why={"world_size": "one GPU per rank"})
    assert declined_reason(caps, _case(), 1) == "world size 1 (it runs 2 to 4 ranks): one GPU per rank"
    assert declined_reason(caps, _case(), 8).startswith("world size 8")
    assert declined_reason(caps, _case(), 3) is None
    assert "needs at least 2 ranks" in declined_reason(UNDECLARED, _case(userbuffers=True), 1)
    assert declined_reason(UNDECLARED, _case(userbuffers=True), 2) is None


def test_the_runners_reason_names_the_stack():
    reason = declined_by(PATCHED, _case(scaling="tensorwise"), 2)
    assert reason.startswith("emulated-patched declines this case: scaling='tensorwise'")
    assert declined_by(PATCHED, _case(), 2) is None
