"""The built-in cases: recipes, shapes, special values and the reproducers, by name.

Names are paths (``delayed/hybrid-h16-max-m0``, ``repro/hygiene``), so ``--cases`` can select
families by substring or keyword expression.
"""

from __future__ import annotations

import fnmatch
import re

from harness.case.spec import CaseSpec
from harness.errors import UsageError
from harness.fp8.recipe import DelayedScalingRecipe
from harness.case.model import TP_LAYOUTS, ModelSpec


def _case(name, *, fmt="HYBRID", hist=16, algo="max", margin=0, dims=(16, 32, 16), steps=6, models=3,
          special="none", fp8_params=True, construction="copy", data_parallel=True, batch=8, reduce_amax=True,
          reuse=""):
    recipe = DelayedScalingRecipe(fp8_format=fmt, margin=margin, amax_history_len=hist,
                                  amax_compute_algo=algo, reduce_amax=reduce_amax)
    model = ModelSpec(dims=tuple(dims), recipe=recipe, fp8_params=fp8_params, construction=construction,
                      data_parallel=data_parallel)
    return CaseSpec(name=name, model=model, batch=batch, steps=steps, models=models, special=special, reuse=reuse)


def builtin_cases(world_size: int | None = None) -> list[CaseSpec]:
    """Every built-in case a group of ``world_size`` ranks can run (None: every one), in the order a
    run executes them: what ``./scripts/run`` runs with no ``--cases``.

    Besides the recipes, special values and reproducers, it holds what makes a plain run test the
    id-reuse path whatever ``--reuse`` says: cases that force reuse themselves
    (:func:`forced_reuse_cases`) and the Userbuffers family (:func:`userbuffers_cases`, which
    needs at least 2 ranks), last, so that the reproducers run on the ids they always met.
    """
    cases = [
        # TE's default recipe (1.x): HYBRID, margin 0, history 1024, 'max', reduce_amax on.
        _case("delayed/te-default", hist=1024, steps=10),
        _case("delayed/te-default-init-cast", hist=1024, construction="init_cast", steps=10),
    ]
    for hist in (1, 2, 16):
        for algo in ("max", "most_recent"):
            for margin in (0, 2):
                tag = "max" if algo == "max" else "recent"
                cases.append(_case(f"delayed/hybrid-h{hist}-{tag}-m{margin}", hist=hist, algo=algo, margin=margin))
    cases += [
        _case("delayed/e4m3-h16", fmt="E4M3"),
        _case("delayed/e5m2-h16", fmt="E5M2"),
        _case("delayed/hp-weights-h16", fp8_params=False),
        _case("delayed/local-grads", data_parallel=False),
        _case("delayed/deep-narrow", dims=(8, 8, 8, 8, 8), steps=5),
        _case("delayed/wide", dims=(64, 96), batch=16, steps=4),
        _case("special/zero-amax", special="zero", hist=2),
        _case("special/inf-amax", special="inf", hist=16),
        _case("special/nan-input", special="nan", hist=16),
        _case("special/tiny-amax", special="tiny", hist=2),
        _case("special/huge-values", special="huge", hist=16, fmt="E4M3"),
        _case("special/tiny-most-recent", special="tiny", hist=1, algo="most_recent"),
        # Reproducers: built and destroyed many times with FP8 weights, the pattern of
        # TE's distributed tests (many models per launch, same recipe and group).
        #   hygiene: stale ids stay in the bookkeeping once a model dies (any reuse mode).
        _case("repro/hygiene", hist=16, models=1, steps=2),
        #   prelude: one model of the isolation reproducer's recipe, so that its ids are parked
        #   when repro/isolation starts (it passes on every stack but for hygiene).
        _case("repro/prelude", hist=16, margin=1, models=1, steps=2, dims=(16, 16)),
        #   isolation: with symmetric reuse, the first model takes the ids of the previous
        #   case's last model, its weight copy completes a stale set and an all-reduce fires
        #   that the isolated run does not have.
        _case("repro/isolation", hist=16, margin=1, models=2, steps=2, dims=(16, 16), reuse="symmetric"),
        #   cross-rank: the weight copy of model 1 completes the stale set on the reusing rank
        #   only; its all-reduce (2 amaxes) meets the peer's autocast-exit all-reduce (4).
        _case("repro/cross-rank", hist=16, models=2, steps=3, dims=(16, 16)),
        #   reference: no weight copy at construction, no gradient all-gather: every collective
        #   is a 4-amax all-reduce, so the reusing rank's extra one pairs silently with the
        #   peer's next one and amaxes of different tensors are max-ed together.
        _case("repro/reference", hist=16, models=2, steps=3, dims=(16, 16), data_parallel=False,
              construction="init_cast"),
    ]
    cases += forced_reuse_cases()
    if world_size is None or world_size >= 2:
        cases += userbuffers_cases()
    return cases


def forced_reuse_cases() -> list[CaseSpec]:
    """Cases whose forced reuse is built in (``CaseSpec.reuse``): every model after the first takes
    the ids of the weights of a model before it, on every rank (``symmetric``) or on rank 0 only
    (``asymmetric``), whatever the run's ``--reuse``. Both constructions: ``init_cast`` (the
    construction cast is all a new weight gets before its first step, so state keyed by a dead
    weight's id meets it unmasked) and ``copy``. Three layers of one shape, so a weight taking
    any dead weight's id takes one of its own shape, whatever ids earlier cases left parked.
    """
    return [_case(f"reuse/{construction.replace('_', '-')}-{mode}", dims=(16, 16, 16, 16), models=3, steps=3,
                  construction=construction, reuse=mode)
            for construction in ("init_cast", "copy") for mode in ("symmetric", "asymmetric")]


def all_cases() -> list[CaseSpec]:
    """The default run's cases plus one a selection must name: ``recipes/no-reduce-amax``.

    ``recipes/no-reduce-amax`` passes alone or first in a process. After cases of other recipes
    it fails isolation on TE-like stacks, rightly: TE reduces every (recipe, group) key ever seen
    at each autocast exit, so its exits all-reduce the dead keys' buffers, which they never do
    alone. That is the unpruned buffers' doing (see the retention report), so the default run,
    which shares one process across every case, leaves it out.
    """
    extra = [_case("recipes/no-reduce-amax", reduce_amax=False)]
    return builtin_cases() + extra


def userbuffers_cases() -> list[CaseSpec]:
    """The pattern of TE's Userbuffers test: 8 configurations (bias x column/row x weight
    requires grad) in one launch, FP8 parameters, each built and destroyed in turn, sharing the
    launch's buffers; plus one with overlap off (plain collectives, same bits).

    On the buggy stack with asymmetric reuse every one of them fails: the reusing rank's stale
    hook issues an extra amax all-reduce while its peer is already in the next ring exchange,
    so the all-reduce waits for a peer that waits for a chunk that never comes; the report
    names the communicator, the operation, the chunk, the counter and both ranks (liveness).

    These cases need a group of at least 2 ranks: a run of one rank leaves them out of its
    default cases; ``--cases userbuffers`` selects them all.
    """
    out = []
    recipe = DelayedScalingRecipe(amax_history_len=16)
    for layout in TP_LAYOUTS:
        for bias in (False, True):
            for wgrad in (True, False):
                name = f"userbuffers/{layout}{'-bias' if bias else ''}{'' if wgrad else '-frozen'}"
                model = ModelSpec(dims=(32, 32), recipe=recipe, fp8_params=True, construction="copy",
                                  data_parallel=False, userbuffers=True, tp_layout=layout, bias=bias,
                                  weight_grad=wgrad)
                out.append(CaseSpec(name=name, model=model, batch=8, steps=3, models=2))
    out.append(CaseSpec(name="userbuffers/column-no-overlap", batch=8, steps=3, models=2,
                        model=ModelSpec(dims=(32, 32), recipe=recipe, data_parallel=False, userbuffers=True,
                                        tp_layout="column", overlap=False)))
    out.append(CaseSpec(name="userbuffers/init-cast-margin3", batch=8, steps=3, models=2,
                        model=ModelSpec(dims=(32, 32), recipe=DelayedScalingRecipe(amax_history_len=16, margin=3),
                                        fp8_params=True, construction="init_cast", data_parallel=False,
                                        userbuffers=True, tp_layout="column")))
    out += userbuffers_forced_reuse_cases() + long_process_cases()
    return out


def userbuffers_forced_reuse_cases() -> list[CaseSpec]:
    """Tensor-parallel cases that force reuse themselves, as :func:`forced_reuse_cases` do for data
    parallel: every model after the first takes the ids of a dead model's FP8 weight storages, on
    every rank (column layout) or on rank 0 only (row layout), whatever the run's ``--reuse``. So
    state keyed by a dead weight's id, read anywhere on the tensor-parallel path (its GEMMs
    included), meets a new weight in every run."""
    recipe = DelayedScalingRecipe(amax_history_len=16)
    return [CaseSpec(name=f"userbuffers/reuse-{layout}-{mode}", batch=8, steps=3, models=3, reuse=mode,
                     model=ModelSpec(dims=(32, 32), recipe=recipe, fp8_params=True, construction="copy",
                                     data_parallel=False, userbuffers=True, tp_layout=layout, bias=bias))
            for layout, mode, bias in (("column", "symmetric", False), ("row", "asymmetric", True))]


LONG_CYCLES = 300     # models of the long-process case's light loop: 2 operations per model per communicator


def long_process_cases() -> list[CaseSpec]:
    """A long-lived process in one case: after one model with every per-model check,
    :data:`LONG_CYCLES` more built, trained 2 steps and destroyed in a light loop
    (:mod:`harness.runner.rank.cycles`), so the column layout's communicators go through
    ``2 * LONG_CYCLES`` operations and more (600: a counter of 9 bits or fewer wraps) and the
    build/destroy cycle through ``LONG_CYCLES + 1`` models in one process."""
    recipe = DelayedScalingRecipe(amax_history_len=16)
    return [CaseSpec(name="userbuffers/long-column", batch=8, steps=2, models=1, cycles=LONG_CYCLES,
                     model=ModelSpec(dims=(16, 16), recipe=recipe, fp8_params=True, construction="copy",
                                     data_parallel=False, userbuffers=True, tp_layout="column"))]


def select_cases(cases: list[CaseSpec], expr: str | None) -> list[CaseSpec]:
    """Cases whose name matches ``expr``.

    ``expr`` is a substring, a glob (``delayed/*-h2-*``), or a pytest-style keyword expression
    of substrings with ``and``, ``or``, ``not`` and parentheses (``repro and not reference``).
    """
    if not expr:
        return list(cases)
    if any(ch in expr for ch in "*?["):
        return [c for c in cases if fnmatch.fnmatch(c.name, expr)]
    tokens = re.findall(r"\(|\)|[^\s()]+", expr)
    words = {"and", "or", "not", "(", ")"}
    if not any(t in words for t in tokens):
        return [c for c in cases if expr in c.name]
    # Evaluate with Python's own boolean grammar, after quoting every operand as a test on the name.
    pieces = []
    for tok in tokens:
        if tok in words:
            pieces.append(tok)
        else:
            pieces.append(f"({tok!r} in name)")
    source = " ".join(pieces)
    try:
        code = compile(source, "<cases>", "eval")
    except SyntaxError:
        raise UsageError(f"--cases {expr!r} is not a valid keyword expression (use and/or/not and parentheses)") from None
    return [c for c in cases if eval(code, {"__builtins__": {}}, {"name": c.name})]
