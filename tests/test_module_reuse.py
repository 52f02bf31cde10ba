"""A dead model's module objects are reused by force, though the stack names only its weights.

Known bad: ``tests/planted/module_id_cache.py`` keeps per-module state keyed by ``id(layer)`` in
an ``lru_cache`` (no scan sees it), and lists only weight storages in ``reuse_targets()``. In a
case that forces reuse, every model after the first is built on the last dead model's module
addresses (``harness/idreuse/shells.py``), so a later layer takes a dead layer's master weight and
the reference oracle fails on it, in every run, with ``--reset-between-cases`` too.
"""

from __future__ import annotations

import pytest

from harness.case.catalog import builtin_cases
from harness.runner.inproc import execute_here
from harness.stacks import load_stack
from tests.planted import cleared, module_id_cache

CASES = {c.name: c for c in builtin_cases(world_size=1)}
REUSE_CASES = [name for name in CASES if name.startswith("reuse/")]


@pytest.fixture(autouse=True)
def clean_state():
    yield from cleared(module_id_cache.STACK, load_stack("emulated-patched"))


@pytest.mark.parametrize("reset", [False, True], ids=["shared", "reset-between-cases"])
@pytest.mark.parametrize("name", REUSE_CASES)
def test_a_cache_keyed_by_module_id_is_caught_in_every_forced_reuse_case(name, reset):
    result = execute_here(CASES[name], module_id_cache.STACK, reset_between_cases=reset)
    reference = [f for f in result.failures if f.oracle == "reference"]
    assert reference and reference[0].model == 1, (result.failures, result.reuse_examples)
    assert "model 1: model.layers[2] (Linear) took the id of dead model.layers[2] (Linear)" in result.reuse_examples, \
        result.reuse_examples
    assert result.reuse_misses == 0, result.reuse_examples


@pytest.mark.parametrize("name", REUSE_CASES)
def test_the_patched_stack_passes_with_its_modules_reused(name):
    result = execute_here(CASES[name], load_stack("emulated-patched"))
    assert result.failures == [] and result.reuse_misses == 0, (result.failures, result.reuse_examples)
    assert any("(Linear) took the id of dead" in line for line in result.reuse_examples), result.reuse_examples
