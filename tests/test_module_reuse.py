"""A dead model's module objects are reused by force, though the stack names only its weights.

Known bad: ``tests/planted/module_id_cache.py`` keeps per-module state keyed by ``id(layer)`` in
an ``lru_cache`` (no scan sees it), and lists only weight storages in ``reuse_targets()``. In a
case that forces reuse, every model after the first is built on the last dead model's module
addresses (``harness/idreuse/shells.py``), so a later layer takes a dead layer's master weight and
the reference oracle fails on it, in every run, with ``--reset-between-cases`` too.

Which reuse events a result shows in ``reuse_examples`` (the first few per model, in walk order)
depends on which other objects landed on a dead one's address; the checks read ``reuse_log``, every
event, and one test shows a model whose own objects crowd the layers out of the examples.
"""

from __future__ import annotations

import json

import pytest

from harness.case.catalog import builtin_cases
from harness.idreuse import shells
from harness.idreuse.morgue import ReusePolicy
from harness.oracles.exercised import not_exercised
from harness.runner.inproc import execute_here
from harness.runner.rank.result import EXAMPLES_PER_MODEL, RankResult, ReuseEvent
from harness.stacks import load_stack
from tests.planted import cleared, module_id_cache
from tests.planted.module_id_cache import ModuleIdCacheStack

CASES = {c.name: c for c in builtin_cases(world_size=1)}
REUSE_CASES = [name for name in CASES if name.startswith("reuse/")]
LAST_LAYER_REBORN = ReuseEvent(1, "model.layers[2] (Linear)", "model.layers[2] (Linear)")


class _Hook:
    """A plain object a model holds after its layers: walked before them, and reborn by force."""


class CrowdedStack(ModuleIdCacheStack):
    """The planted stack, each model holding as many hooks as a model's examples show."""

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        model.hooks = [_Hook() for _ in range(EXAMPLES_PER_MODEL)]
        return model

    def model_objects(self, model) -> list:
        return [*super().model_objects(model), *model.hooks]


CROWDED = CrowdedStack()


@pytest.fixture(autouse=True)
def clean_state():
    yield from cleared(module_id_cache.STACK, CROWDED, load_stack("emulated-patched"))


def landed(result) -> str:
    """What an assertion's message starts with: every forced landing that missed, by name (the
    cause of a model whose layers are reborn one dead address early), or that none did."""
    if not result.shell_misses:
        return "every dead model object got its shell"
    return "forced landing missed (the harness did not force the reuse): " + "; ".join(
        m.line() for m in result.shell_misses)


@pytest.mark.parametrize("reset", [False, True], ids=["shared", "reset-between-cases"])
@pytest.mark.parametrize("name", REUSE_CASES)
def test_a_cache_keyed_by_module_id_is_caught_in_every_forced_reuse_case(name, reset):
    result = execute_here(CASES[name], module_id_cache.STACK, reset_between_cases=reset)
    assert result.shell_misses == [], landed(result)
    reference = [f for f in result.failures if f.oracle == "reference"]
    assert reference and reference[0].model == 1, (landed(result), result.failures, result.reuse_examples)
    assert LAST_LAYER_REBORN in result.reuse_log, (landed(result), result.reuse_log)
    assert result.reuse_misses == 0, result.reuse_examples


@pytest.mark.parametrize("name", REUSE_CASES)
def test_a_layer_reborn_past_the_examples_shown_is_still_checked(name):
    # The model and its hooks are walked, and reborn, before its layers: the examples, capped,
    # show none of the layers, and a check that read them would miss every layer's rebirth.
    result = execute_here(CASES[name], CROWDED)
    assert result.shell_misses == [], landed(result)
    hooks = [e for e in result.reuse_log if e.model == 1 and e.new.endswith("(_Hook)")]
    assert len(hooks) == EXAMPLES_PER_MODEL and LAST_LAYER_REBORN in result.reuse_log, result.reuse_log
    assert LAST_LAYER_REBORN.line() not in result.reuse_examples, result.reuse_examples
    assert result.reuse_events == len(result.reuse_log) and result.reuse_misses == 0, result.reuse_examples
    reference = [f for f in result.failures if f.oracle == "reference"]
    assert reference and reference[0].model == 1, (result.failures, result.reuse_examples)
    # what another rank's result brings: the log crosses the process boundary whole
    assert RankResult.from_dict(json.loads(json.dumps(result.to_dict()))).reuse_log == result.reuse_log


@pytest.mark.parametrize("name", REUSE_CASES)
def test_the_patched_stack_passes_with_its_modules_reused(name):
    result = execute_here(CASES[name], load_stack("emulated-patched"))
    assert result.shell_misses == [], landed(result)
    assert result.failures == [] and result.reuse_misses == 0, (result.failures, result.reuse_examples)
    assert any(e.new.endswith("(Linear)") and e.old.endswith("(Linear)") for e in result.reuse_log), result.reuse_log


def _first_linear_not_shelled(monkeypatch) -> None:
    """The first dead Linear's search gives up at once: its block gets no shell."""
    land, missed = shells._Search.land, []

    def land_but_the_first_linear(self, target, make):
        if not missed and make.__defaults__[0].__name__ == "Linear":
            missed.append(target)
            return None, 0
        return land(self, target, make)

    monkeypatch.setattr(shells._Search, "land", land_but_the_first_linear)


def test_a_shell_that_did_not_land_is_named_and_is_what_shifts_the_layers(monkeypatch):
    # What full runs showed, made on purpose: model 0's layers[0] got no shell, so model 1's
    # layers[0] was born on dead layers[1], its layers[1] on dead layers[2], and its layers[2] on none.
    _first_linear_not_shelled(monkeypatch)
    result = execute_here(CASES["reuse/init-cast-symmetric"], module_id_cache.STACK)
    assert [(m.model, m.name) for m in result.shell_misses] == [(0, "model.layers[0] (Linear)")], result.shell_misses
    shifted = {ReuseEvent(1, f"model.layers[{i}] (Linear)", f"model.layers[{i + 1}] (Linear)") for i in (0, 1)}
    assert shifted <= set(result.reuse_log) and LAST_LAYER_REBORN not in result.reuse_log, result.reuse_log
    assert "forced landing missed" in landed(result) and "dead model.layers[0] (Linear)" in landed(result)
    assert RankResult.from_dict(json.loads(json.dumps(result.to_dict()))).shell_misses == result.shell_misses


def test_a_pass_whose_shell_did_not_land_is_not_forced_rather_than_passed(monkeypatch):
    _first_linear_not_shelled(monkeypatch)
    case = CASES["reuse/init-cast-symmetric"]
    result = execute_here(case, load_stack("emulated-patched"))
    assert result.failures == [] and result.reuse_events > 0 and result.shell_misses, result.shell_misses
    lines = [f"rank 0: {m.line()}" for m in result.shell_misses]
    reason = not_exercised(case, ReusePolicy.parse("natural"), "passed", result.reuse_events, 0, lines)
    assert reason.startswith("not forced: the case forces --reuse symmetric but rank 0: model 0: no shell landed "
                             "on dead model.layers[0] (Linear)"), reason
