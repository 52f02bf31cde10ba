"""Hypothesis strategies for stress cases.

Every choice is drawn so that Hypothesis's shrinker moves it toward the simplest case that
still fails: fewer layers, steps and models, the smallest dims, the first entry of each
``sampled_from`` list (HYBRID, history length 1, 'max', margin 0, no special values,
``copy`` construction, the run's reuse mode), and ``False`` for the booleans.

``reduce_amax`` stays on. With it off, a TE-like stack reduces the buffers of every recipe it
has ever seen at each autocast exit, so such a case after cases of other recipes legitimately
issues collectives it does not issue alone (see the first case in
:mod:`harness.case.catalog`): the isolation oracle would report the design, not a bug.
"""

from __future__ import annotations

from hypothesis import strategies as st

from harness.case.spec import SPECIALS, CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe
from harness.stacks.protocol import ModelSpec

FORMATS = ("HYBRID", "E4M3", "E5M2")
HISTORY_LENGTHS = (1, 2, 16, 1024)
ALGOS = ("max", "most_recent")
# "" takes the run's --reuse; listed first so that shrinking falls back to it.
REUSE_MODES = ("", "natural", "symmetric", "asymmetric")
# "copy" first: TE's tests set weights that way, and it is the catalog's default.
CONSTRUCTION_ORDER = ("copy", "init_cast")
PLACEHOLDER = "stress/candidate"


def recipes() -> st.SearchStrategy[DelayedScalingRecipe]:
    return _RECIPES


def dims() -> st.SearchStrategy[tuple]:
    """1 to 3 layers, each dim a multiple of 8 from 8 to 64 (FP8 GEMMs want aligned dims)."""
    return _DIMS


# Built once: strategies are cheap to draw from but not to construct and validate.
_RECIPES = st.builds(
    DelayedScalingRecipe,
    fp8_format=st.sampled_from(FORMATS),
    margin=st.integers(0, 3),
    amax_history_len=st.sampled_from(HISTORY_LENGTHS),
    amax_compute_algo=st.sampled_from(ALGOS),
    reduce_amax=st.just(True),
)
_DIMS = st.lists(st.integers(1, 8).map(lambda k: 8 * k), min_size=2, max_size=4).map(tuple)
_BOOLS = st.booleans()
_CONSTRUCTIONS = st.sampled_from(CONSTRUCTION_ORDER)
# sampled_from rather than integers: uniform over the range (integers favour the bounds), and
# still shrinking toward the first entry.
_STEPS = st.sampled_from(range(1, 7))
_MODELS = st.sampled_from(range(1, 5))
_SPECIALS = st.sampled_from(SPECIALS)
_REUSE = st.sampled_from(REUSE_MODES)


@st.composite
def _case_specs(draw, name: str) -> CaseSpec:
    model = ModelSpec(dims=draw(_DIMS), recipe=draw(_RECIPES), fp8_params=draw(_BOOLS),
                      construction=draw(_CONSTRUCTIONS), data_parallel=draw(_BOOLS))
    return CaseSpec(name=name, model=model, steps=draw(_STEPS), models=draw(_MODELS), special=draw(_SPECIALS),
                    reuse=draw(_REUSE))


def case_specs(name: str = PLACEHOLDER) -> st.SearchStrategy[CaseSpec]:
    """One case; the caller renames it (its name seeds its data)."""
    return _case_specs(name)


def describe(case: CaseSpec) -> str:
    """A short human description: recipe, shape, steps, models and the flags that are set."""
    m = case.model
    parts = [m.recipe.short(), "x".join(map(str, m.dims)), f"{case.steps} step{'s' * (case.steps != 1)}",
             f"{case.models} model{'s' * (case.models != 1)}"]
    parts.append("fp8-params" if m.fp8_params else "hp-params")
    parts.append(m.construction)
    if m.data_parallel:
        parts.append("dp")
    if case.special != "none":
        parts.append(f"special={case.special}")
    if case.reuse:
        parts.append(f"reuse={case.reuse}")
    return " ".join(parts)


def complexity(case: CaseSpec) -> dict:
    """What shrinking reduces, for the report."""
    return {"steps": case.steps, "models": case.models, "layers": len(case.model.dims) - 1,
            "recipe": case.model.recipe.short()}
