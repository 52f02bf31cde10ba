"""Hypothesis strategies for stress cases, drawn from what the stack under test declares it runs.

The stack's :class:`~harness.stacks.capabilities.Capabilities` bound every field: formats,
scalings, constructions, FP8 or high-precision weights, data-parallel or not, whether the
delayed recipe's margin, history and algorithm mean anything to it, and the multiples its
widths and batch must be. Every case drawn is one the stack runs, and every case Hypothesis
shrinks to is drawn from the same strategy, so it is one too. For a stack that declares
nothing (and for the emulated stacks) the draws are the same as before declarations existed.

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

import dataclasses
import functools
import math

from hypothesis import strategies as st

from harness.case.model import TP_LAYOUTS
from harness.case.spec import SPECIALS, CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe
from harness.stacks.capabilities import UNDECLARED, Capabilities, Construction
from harness.stacks.protocol import ModelSpec

# Stress's own order within each field (first = where shrinking goes); a stack's declaration
# says which of them it runs.
FORMATS = ("HYBRID", "E4M3", "E5M2")
HISTORY_LENGTHS = (1, 2, 16, 1024)
ALGOS = ("max", "most_recent")
# "" takes the run's --reuse; listed first so that shrinking falls back to it.
REUSE_MODES = ("", "natural", "symmetric", "asymmetric")
# "copy" first: TE's tests set weights that way, and it is the catalog's default.
CONSTRUCTION_ORDER = ("copy", "init_cast")
PLACEHOLDER = "stress/candidate"
DIM_UNIT = 8          # widths are multiples of 8 (and of the stack's dim_multiple) ...
DIM_MAX = 64          # ... up to 64 (or the first multiple above, when the unit is larger)
BATCH = 8             # the batch: 8, or the first multiple of the stack's batch_multiple above


def recipes(capabilities: Capabilities = UNDECLARED) -> st.SearchStrategy[DelayedScalingRecipe]:
    return _strategies(capabilities)["recipe"]


def dims(capabilities: Capabilities = UNDECLARED) -> st.SearchStrategy[tuple]:
    """1 to 3 layers, each dim a multiple of 8 and of the declared multiple (FP8 GEMMs want aligned dims)."""
    return _strategies(capabilities)["dims"]


def _one_of(values) -> st.SearchStrategy:
    """``sampled_from``, or ``just`` for a single value (which draws nothing)."""
    values = list(values)
    return st.just(values[0]) if len(values) == 1 else st.sampled_from(values)


def _flags(allowed) -> st.SearchStrategy[bool]:
    return st.booleans() if len(allowed) == 2 else st.just(allowed[0])


@functools.lru_cache(maxsize=32)
def _strategies(caps: Capabilities) -> dict:
    """The strategies for one declaration, built once (cheap to draw from, not to construct)."""
    formats = [f for f in FORMATS if f in caps.formats]
    if caps.delayed_recipe:
        margin, history, algo = st.integers(0, 3), st.sampled_from(HISTORY_LENGTHS), st.sampled_from(ALGOS)
    else:   # the stack ignores them: the recipe's defaults, nothing drawn
        default = DelayedScalingRecipe()
        margin, history = st.just(default.margin), st.just(default.amax_history_len)
        algo = st.just(default.amax_compute_algo.value)
    unit = math.lcm(DIM_UNIT, caps.dim_multiple)
    return {
        "recipe": st.builds(
            DelayedScalingRecipe, fp8_format=_one_of(formats), margin=margin, amax_history_len=history,
            amax_compute_algo=algo,
            # reduce_amax stays on where the stack allows it (see the module docstring).
            reduce_amax=st.just(True in caps.reduce_amax)),
        "dims": st.lists(st.integers(1, max(1, DIM_MAX // unit)).map(lambda k: unit * k),
                         min_size=2, max_size=4).map(tuple),
        "fp8_params": _flags(caps.fp8_params),
        "data_parallel": _flags(caps.data_parallel),
        "construction": _one_of(c for c in CONSTRUCTION_ORDER if Construction(c) in caps.constructions),
        "scaling": _one_of(caps.drawn_scalings()),
        "batch": math.lcm(BATCH, caps.batch_multiple),
        # Only where the declaration is the whole story: TE refuses most Userbuffers shapes through
        # its ``declines`` (square layers, chunks of 16), and stress draws only cases a stack runs.
        "userbuffers": _flags(sorted(caps.userbuffers)) if caps.declines is None else st.just(False),
    }


# sampled_from rather than integers: uniform over the range (integers favour the bounds), and
# still shrinking toward the first entry.
_STEPS = st.sampled_from(range(1, 7))
_MODELS = st.sampled_from(range(1, 5))
_SPECIALS = st.sampled_from(SPECIALS)
_REUSE = st.sampled_from(REUSE_MODES)
# Models more in the light loop: none, or a long-lived process (a communicator through hundreds
# of operations, hundreds of builds and deaths).
_CYCLES = st.sampled_from((0, 0, 0, 100, 300))


@st.composite
def _case_specs(draw, name: str, caps: Capabilities) -> CaseSpec:
    s = _strategies(caps)
    model = ModelSpec(dims=draw(s["dims"]), recipe=draw(s["recipe"]), fp8_params=draw(s["fp8_params"]),
                      construction=draw(s["construction"]), data_parallel=draw(s["data_parallel"]))
    case = CaseSpec(name=name, model=model, batch=s["batch"], steps=draw(_STEPS), models=draw(_MODELS),
                    special=draw(_SPECIALS), reuse=draw(_REUSE))
    # Drawn last, and nothing drawn for a stack with one scaling: the emulated stacks' draws
    # are those of a strategy that never had the field.
    scaling = draw(s["scaling"])
    if scaling != model.scaling:
        case = case.with_(model=dataclasses.replace(model, scaling=scaling))
    # Drawn after everything above, so the data-parallel draws are what they were: the family,
    # then how long the process runs on (cycles: harness.runner.rank.cycles).
    if draw(s["userbuffers"]):
        case = case.with_(model=draw(_userbuffers_model(case.model, caps)))
    cycles = draw(_CYCLES)
    return case.with_(cycles=cycles) if cycles else case


def _userbuffers_model(model: ModelSpec, caps: Capabilities) -> st.SearchStrategy[ModelSpec]:
    """The drawn model as one tensor-parallel layer (first width -> last), Userbuffers overlap on:
    the layout, a bias or not, the weight trained or frozen."""
    return st.builds(dataclasses.replace, st.just(model), dims=st.just((model.dims[0], model.dims[-1])),
                     userbuffers=st.just(True), data_parallel=st.just(False), tp_layout=st.sampled_from(TP_LAYOUTS),
                     bias=_flags(sorted(caps.bias)), weight_grad=st.sampled_from((True, False)))


def case_specs(name: str = PLACEHOLDER, capabilities: Capabilities = UNDECLARED) -> st.SearchStrategy[CaseSpec]:
    """One case the stack runs, by its declaration; the caller renames it (its name seeds its data).

    Data-parallel Linear stacks, or (where the stack declares them and no refusal of its own) one
    tensor-parallel Userbuffers layer, with or without a bias; either may run on for :data:`_CYCLES` models more.
    """
    return _case_specs(name, capabilities)


def describe(case: CaseSpec) -> str:
    """A short human description: recipe, shape, steps, models and the flags that are set."""
    m = case.model
    parts = [m.recipe.short(), "x".join(map(str, m.dims)), f"{case.steps} step{'s' * (case.steps != 1)}",
             f"{case.models} model{'s' * (case.models != 1)}"]
    if m.scaling != "delayed":
        parts.insert(0, m.scaling)
    if case.batch != BATCH:
        parts.append(f"batch {case.batch}")
    parts.append("fp8-params" if m.fp8_params else "hp-params")
    parts.append(m.construction)
    if m.data_parallel:
        parts.append("dp")
    if m.userbuffers:
        parts.append(f"userbuffers-{m.tp_layout}{'-bias' if m.bias else ''}{'' if m.weight_grad else '-frozen'}")
    if case.cycles:
        parts.append(f"cycles={case.cycles}")
    if case.special != "none":
        parts.append(f"special={case.special}")
    if case.reuse:
        parts.append(f"reuse={case.reuse}")
    return " ".join(parts)


def complexity(case: CaseSpec) -> dict:
    """What shrinking reduces, for the report."""
    return {"steps": case.steps, "models": case.models, "layers": len(case.model.dims) - 1,
            "recipe": case.model.recipe.short()}
