"""Hygiene names the culprit of a stale id: a cache behind ``functools.lru_cache``, and what the
key was the id of.

Known bad: ``tests/planted/lru_weight_data.py`` keeps master weights in an ``lru_cache`` keyed by
``id(weight._data)`` (its table lives in C, under the wrapper): each dead weight's id is named
with the cached function's dotted name. ``tests/planted/activation_id_cache.py`` keys a table by
each layer's input activation: its entries are named as an activation's id, never as a weight's
or a master tensor's.
"""

from __future__ import annotations

import pytest

from harness.case.catalog import builtin_cases
from harness.runner.inproc import execute_here
from harness.stacks import load_stack
from tests.planted import activation_id_cache, cleared, lru_weight_data

CASES = {c.name: c for c in builtin_cases(world_size=1)}
CACHED = "tests.planted.lru_weight_data._master_of"


@pytest.fixture(autouse=True)
def fresh_state():
    yield from cleared(lru_weight_data.STACK, activation_id_cache.STACK, load_stack("emulated-patched"))


def test_an_lru_cache_keyed_by_a_weight_storage_id_is_named_by_its_function():
    case = CASES["delayed/te-default-init-cast"].with_(steps=1)
    result = execute_here(case, lru_weight_data.STACK)
    hygiene = [f for f in result.failures if f.oracle == "hygiene" and f.registry == CACHED]
    assert hygiene, result.failures
    assert all(f.detail.startswith(f"{CACHED} key holds id 0x") for f in hygiene), [f.detail for f in hygiene]
    first = [f.detail for f in hygiene if f.model == 0]
    assert first and all("the id of a weight" in line for line in first), first


def test_an_lru_cache_keyed_by_a_weight_storage_id_is_caught_where_reuse_is_forced():
    result = execute_here(CASES["reuse/copy-symmetric"], lru_weight_data.STACK)
    assert {f.oracle for f in result.failures} >= {"hygiene"}, result.failures
    assert any(f.registry == CACHED for f in result.failures), result.failures


def test_a_cache_keyed_by_an_activations_id_is_named_as_an_activations_id():
    result = execute_here(CASES["delayed/te-default-init-cast"].with_(steps=2), activation_id_cache.STACK)
    hygiene = [f.detail for f in result.failures if f.oracle == "hygiene"]
    assert hygiene and all(line.startswith("tests.planted.activation_id_cache.ROWS_BY_INPUT key holds id 0x")
                           for line in hygiene), hygiene
    # the inputs the harness handed in are named; a later layer's input (the harness never sees it)
    # born where an object of the model died is "not known", never that object's
    assert any("the id of an activation" in line for line in hygiene), hygiene
    assert all("the id of an activation" in line or "what it was the id of is not known" in line
               for line in hygiene), hygiene


def test_the_patched_stack_still_has_no_stale_ids():
    for name in ("delayed/te-default-init-cast", "reuse/copy-symmetric"):
        assert execute_here(CASES[name], load_stack("emulated-patched")).failures == []


def test_discovery_reads_lru_cache_tables_of_functions_and_methods():
    import functools
    import types

    from harness.idreuse.containers import discover_containers, registry_ints

    module = types.ModuleType("planted_lru_probe")

    @functools.lru_cache(maxsize=8)
    def by_id(ident):
        return ident

    class Holder:
        @functools.cache
        def of(self, ident):
            return ident

    by_id.__module__ = Holder.__module__ = "planted_lru_probe"
    Holder.__qualname__ = "Holder"
    module.by_id, module.Holder = by_id, Holder
    by_id(4096 * 8)
    Holder().of(4096 * 16)
    found = discover_containers([module])
    assert registry_ints(found["planted_lru_probe.by_id"]) == {4096 * 8: "key"}
    assert 4096 * 16 in registry_ints(found["planted_lru_probe.Holder.of"])
