"""torchao's case catalogue: recipes, shapes, special values, and the id-hook reproducers, by name.

Every case's ``recipe`` is a default :class:`DelayedScalingRecipe` that this stack ignores, except
for ``reduce_amax=False``: torchao scales each tensor from its own amax on each rank and never
all-reduces amaxes, so input and gradient scales legitimately differ between ranks (the
cross-rank oracle compares scales only for recipes that reduce amaxes).

Names are paths (``torchao/tensorwise-...``, ``torchao/repro-...``) so ``--cases`` selects families.
"""

from __future__ import annotations

from harness.case.spec import CaseSpec
from harness.fp8.recipe import DelayedScalingRecipe, Format
from harness.stacks.capabilities import Capabilities
from harness.stacks.protocol import ModelSpec

_RECIPE = DelayedScalingRecipe(reduce_amax=False)

# What --sut torchao runs: stress draws from it, the runners skip what it declines, and
# harness.stacks.torchao.model.check_spec refuses the same at build.
CAPABILITIES = Capabilities(
    formats=(Format.HYBRID,),
    scalings=("tensorwise", "rowwise", "rowwise_with_gw_hp"),
    fp8_params=(False,),
    bias=(False,),
    userbuffers=(False,),
    reduce_amax=(False,),
    delayed_recipe=False,
    why={
        "format": ("torchao's float8 recipes cast inputs and weights to E4M3 and gradients to E5M2 (HYBRID); "
                   "the case's format is not read"),
        "scaling": "torchao's float8 recipes that run on CPU with emulated GEMMs",
        "recipe": "torchao scales each tensor from its own current amax",
        "reduce_amax": "torchao scales each tensor from its own amax on each rank and never all-reduces amaxes",
        "fp8_params": "torchao keeps weights in high precision and casts them at every use (no FP8 parameters)",
        "bias": "the adapter builds layers without bias (the harness's initial weights have none)",
        "userbuffers": "torchao has no Userbuffers-style tensor parallelism",
    },
)


def _case(name, *, scaling="tensorwise", dims=(16, 32, 16), steps=3, models=2, batch=8, special="none",
          construction="copy", data_parallel=True, reuse=""):
    model = ModelSpec(dims=tuple(dims), recipe=_RECIPE, fp8_params=False, construction=construction,
                      data_parallel=data_parallel, scaling=scaling)
    return CaseSpec(name=name, model=model, batch=batch, steps=steps, models=models, special=special, reuse=reuse)


def builtin_cases() -> list[CaseSpec]:
    """Every torchao case, in the order a run executes them."""
    return [
        _case("torchao/tensorwise-basic", steps=4, models=3),
        _case("torchao/tensorwise-deep", dims=(8, 8, 8, 8, 8), steps=3),
        _case("torchao/tensorwise-wide", dims=(64, 96), batch=16, steps=3),
        # Odd sizes: nothing is a multiple of 16 (torchao pads nothing when emulating).
        _case("torchao/tensorwise-odd-shapes", dims=(12, 20, 5), batch=3, steps=3),
        _case("torchao/tensorwise-local-grads", data_parallel=False, steps=3),
        _case("torchao/tensorwise-init-cast", construction="init_cast", steps=3),
        # Special values enter step 1's input on every rank (harness.case.data).
        #   zero: amax 0 is clamped to 1e-12 in float64, scale 4.48e14
        _case("torchao/tensorwise-zero", special="zero"),
        #   huge: inputs x 1e6, scales far below 1
        _case("torchao/tensorwise-huge", special="huge"),
        #   tiny: amax ~1e-40 (subnormal), below the 1e-12 clamp: every byte rounds to zero
        _case("torchao/tensorwise-tiny", special="tiny"),
        #   inf: scale 0, inf * 0 = NaN bytes, NaN outputs and weights from then on
        _case("torchao/tensorwise-inf", special="inf"),
        #   nan: a NaN amax, a NaN scale, NaN everywhere after
        _case("torchao/tensorwise-nan", special="nan"),
        # The other recipes that run on CPU: axiswise scales, power-of-two scales.
        _case("torchao/rowwise-basic", scaling="rowwise"),
        _case("torchao/rowwise_with_gw_hp-basic", scaling="rowwise_with_gw_hp"),
        # Reproducers for --inject id-hook: many models of one shape per case, so a new
        # model's weights take the dead model's ids. On a clean torchao they pass.
        #   build: the initial weight is written in at build; on a rank that reused the ids,
        #   the write completes the dead model's "updated" set and reduces inside build.
        _case("torchao/repro-build", dims=(16, 16, 16), steps=2, models=3),
        #   update: no write at build; the stale set completes at the first SGD update of the
        #   next model on the reusing rank, while the peer all-gathers its next gradients.
        _case("torchao/repro-update", dims=(16, 16, 16), steps=2, models=3, construction="init_cast"),
        #   prelude: one model of the isolation reproducer's shape, whose weights are parked
        #   when torchao/repro-isolation starts (no collective diverges in it: under
        #   --inject id-hook only its dead ids are found).
        _case("torchao/repro-prelude", dims=(16, 16), steps=2, models=1),
        #   isolation: the prelude's ids reused on every rank (aligned, so the ranks agree):
        #   the build's weight write completes the prelude's set and reduces, where the same
        #   case alone in a fresh process does not.
        _case("torchao/repro-isolation", dims=(16, 16), steps=2, models=2, reuse="symmetric"),
    ]
