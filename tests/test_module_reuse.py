"""A dead model's module objects are reused by force, though the stack names only its weights.

Known bad: ``tests/planted/module_id_cache.py`` keeps per-module state keyed by ``id(layer)`` in
an ``lru_cache`` (no scan sees it), and lists only weight storages in ``reuse_targets()``. In a
case that forces reuse, every model after the first is built on the last dead model's module
addresses (``harness/idreuse/shells.py``), so a later layer takes a dead layer's master weight and
the reference oracle fails on it, in every run, with ``--reset-between-cases`` too.
"""

from __future__ import annotations

import gc

import pytest

from harness.case.catalog import builtin_cases
from harness.idreuse.morgue import MORGUE, ReusePolicy
from harness.idreuse.shells import SHELLS, placeable, placing
from harness.runner.inproc import execute_here
from harness.stacks import load_stack
from tests.planted import module_id_cache

CASES = {c.name: c for c in builtin_cases(world_size=1)}
REUSE_CASES = [name for name in CASES if name.startswith("reuse/")]


@pytest.fixture(autouse=True)
def clean_state():
    stacks = (module_id_cache.STACK, load_stack("emulated-patched"))
    for stack in stacks:
        stack.reset()
    MORGUE.clear()
    SHELLS.clear()
    yield
    for stack in stacks:
        stack.reset()
    MORGUE.configure(ReusePolicy.parse("natural"), 0)
    MORGUE.clear()
    SHELLS.clear()


@pytest.mark.parametrize("reset", [False, True], ids=["shared", "reset-between-cases"])
@pytest.mark.parametrize("name", REUSE_CASES)
def test_a_cache_keyed_by_module_id_is_caught_in_every_forced_reuse_case(name, reset):
    result = execute_here(CASES[name], module_id_cache.STACK, reset_between_cases=reset)
    assert "model 1: model.layers[2] (Linear) took the id of dead model.layers[2] (Linear)" in result.reuse_examples, \
        result.reuse_examples
    reference = [f for f in result.failures if f.oracle == "reference"]
    assert reference and reference[0].model == 1, result.failures
    assert result.reuse_misses == 0, result.reuse_examples


@pytest.mark.parametrize("name", REUSE_CASES)
def test_the_patched_stack_passes_with_its_modules_reused(name):
    result = execute_here(CASES[name], load_stack("emulated-patched"))
    assert result.failures == [] and result.reuse_misses == 0, (result.failures, result.reuse_examples)
    assert any("(Linear) took the id of dead" in line for line in result.reuse_examples), result.reuse_examples


class Plain:
    pass


class OwnNew:
    def __new__(cls):
        return super().__new__(cls)


def test_only_objects_allocated_by_object_new_are_placeable():
    assert placeable(Plain()) and not placeable(OwnNew()) and not placeable(object())
    import torch

    assert not placeable(torch.empty(1))


def test_a_released_object_is_born_again_on_its_address_and_a_held_one_gets_no_shell():
    MORGUE.configure(ReusePolicy.parse("symmetric"), 0)
    dying, kept = Plain(), Plain()
    addresses = (id(dying), id(kept))
    elsewhere = [kept]
    box = [dying, kept]
    del dying, kept
    assert SHELLS.take(box) == 1 and box == []
    with placing() as counts:
        first, second = Plain(), Plain()
    SHELLS.settle()
    assert id(first) == addresses[0] and id(second) != addresses[1] and elsewhere[0] is not second
    assert counts == [1, 0]


def test_no_placement_where_the_rank_does_not_force_reuse():
    MORGUE.configure(ReusePolicy.parse("asymmetric:1"), 0)
    box = [Plain()]
    address = id(box[0])
    assert SHELLS.take(box) == 1
    with placing() as counts:
        born = [Plain() for _ in range(50)]
    SHELLS.settle()
    gc.collect()
    assert counts == [0, 0] and address not in {id(b) for b in born}
