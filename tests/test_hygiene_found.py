"""Hygiene finds what a stack does not declare, and names what keeps a dead model alive.

Known bad: ``tests/planted/init_cast_cache.py`` keeps an ``id()``-keyed cache in a module global
that is not among its ``registries()``: before containers were discovered in the stack's modules
the hygiene oracle passed it (shown by the declared-registries scan alone); now each stale entry
is named with the container's dotted name. ``tests/planted/keeps_last_model.py`` keeps the last
model in a module global: the survivor line names that global.
"""

from __future__ import annotations

import pytest

from harness.case.catalog import builtin_cases
from harness.idreuse.containers import discover_containers, registry_ints, stack_modules
from harness.idreuse.referrers import referrer_chain
from harness.oracles.hygiene import stale_ids, undeclared_stale_ids
from harness.runner.inproc import execute_here
from harness.stacks import load_stack
from tests.planted import init_cast_cache, keeps_last_model

CASES = {c.name: c for c in builtin_cases()}
UNDECLARED = "tests.planted.init_cast_cache.INIT_CAST_CACHE key holds id 0x"


@pytest.fixture(autouse=True)
def fresh_registries():
    stacks = [load_stack("emulated-patched"), load_stack("emulated-buggy"), init_cast_cache.STACK,
              keeps_last_model.STACK]
    for s in stacks:
        s.reset()
    yield
    for s in stacks:
        s.reset()


def run(case, stack):
    return execute_here(case, stack)


def test_the_declared_registries_alone_do_not_show_the_undeclared_cache():
    stack = init_cast_cache.STACK
    case = CASES["delayed/te-default-init-cast"].with_(steps=1)
    run(case, stack)
    cached = set(init_cast_cache.INIT_CAST_CACHE)
    assert cached, "the planted cache was consulted"
    dead = {ident: "a dead weight" for ident in cached}
    assert stale_ids(stack.registries(), dead) == []          # what hygiene saw before
    lines = undeclared_stale_ids(stack, stack.registries(), dead)
    assert len(lines) == len(cached) and all(line.startswith(UNDECLARED) for line in lines)


def test_an_undeclared_id_keyed_cache_is_named_by_hygiene():
    case = CASES["delayed/te-default-init-cast"].with_(steps=1)
    result = run(case, init_cast_cache.STACK)
    hygiene = [f for f in result.failures if f.oracle == "hygiene"]
    # When the allocator happens to give a later weight a cached (dead) id, that weight starts
    # from the dead one's cast and the reference sees it too: the only other finding allowed.
    assert hygiene and {f.oracle for f in result.failures} <= {"hygiene", "reference"}, result.failures
    lines = [f.detail for f in hygiene]
    assert all(line.startswith(UNDECLARED) and "not among its registries()" in line for line in lines), lines
    # The first model, on an empty cache: both layers' weight bytes, by the dead tensor's path.
    # (Later models' lines may name another dead object that took a cached id by natural reuse.)
    first = [f.detail for f in hygiene if f.model == 0]
    assert sorted(line.split(" of dead ")[1].split(" (")[0] for line in first) == \
        ["model.layers[0].weight._data", "model.layers[1].weight._data"], first
    assert {f.model for f in hygiene} == set(range(case.models))


def test_declared_registries_are_not_reported_twice():
    result = run(CASES["repro/hygiene"], load_stack("emulated-buggy"))
    lines = [f.detail for f in result.failures]
    assert lines and all(line.startswith("id_bookkeeping.") for line in lines), lines


def test_the_patched_stack_has_no_undeclared_stale_ids():
    for name in ("delayed/te-default-init-cast", "repro/cross-rank"):
        assert run(CASES[name], load_stack("emulated-patched")).failures == []


def test_discovery_sees_module_globals_class_attributes_singletons_and_hook_closures():
    names = set(discover_containers(stack_modules(init_cast_cache.STACK), {"stack": init_cast_cache.STACK}))
    assert {"tests.planted.init_cast_cache.INIT_CAST_CACHE",                      # a module global
            "harness.stacks.emulated.amax_buffers.GLOBAL_AMAX_BUFFERS.buffers",    # a singleton's attribute
            "harness.stacks.emulated.id_bookkeeping.AUTOCAST_TO_FP8_PARAMS"} <= names, names
    import types

    module = types.ModuleType("planted_probe")

    class Registry:
        BY_ID = {4096 * 8: "x"}

    Registry.__module__, Registry.__qualname__ = "planted_probe", "Registry"
    seen = {4096 * 16}

    def hook():
        return seen

    module.Registry, module.HOOKS = Registry, [hook]
    found = discover_containers([module])
    assert found["planted_probe.Registry.BY_ID"] is Registry.BY_ID
    assert found["planted_probe.HOOKS[0].<closure seen>"] is seen
    assert registry_ints(found["planted_probe.HOOKS[0].<closure seen>"]) == {4096 * 16: "element"}


def test_a_model_kept_by_a_module_global_is_reported_with_that_global():
    result = run(CASES["repro/hygiene"], keeps_last_model.STACK)
    lines = [f.detail for f in result.failures]
    assert "model (Model) is still alive (held by tests.planted.keeps_last_model.LAST_MODEL -> Model)" in lines, lines
    assert "model.layers[0] (Linear) is still alive (held by tests.planted.keeps_last_model.LAST_MODEL" \
           ".layers[0] -> Linear)" in lines, lines


def test_referrer_chain_through_containers_objects_and_closures():
    import types

    module = types.ModuleType("planted_chain")

    class Holder:
        def __init__(self, obj):
            self.model = obj

    class Model:
        pass

    kept = [Model(), Model(), Model()]
    module.CACHE = {"w": Holder(kept[0])}
    box = [kept[1]]

    def hook():
        return box

    module.HOOK = hook
    Holder.LAST = kept[2]
    Holder.__module__ = "planted_chain"
    import sys

    sys.modules["planted_chain"] = module
    try:
        assert referrer_chain(kept[0], ignore=(kept,)) == "planted_chain.CACHE['w'] -> Holder.model -> Model"
        assert referrer_chain(kept[1], ignore=(kept,)) == "planted_chain.HOOK.<closure box>[0] -> Model"
        assert referrer_chain(kept[2], ignore=(kept,)).endswith("Holder.LAST -> Model")
        assert referrer_chain(Model()) is None
    finally:
        del sys.modules["planted_chain"]
