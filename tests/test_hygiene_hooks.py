"""Hygiene finds id-keyed caches that only callables lead to: a closure reached through a dict of
hooks, and the attributes of a callable object.

Known bad: ``tests/planted/hook_dict_cache.py`` keeps its cache in the closure of a function
that is only a value of the module-level dict ``_HOOKS``; ``tests/planted/callable_memo.py``
keeps its cache as an attribute of a module-level callable object. Neither is among the stack's
``registries()``: hygiene names each stale entry by the container's dotted path.
"""

from __future__ import annotations

import types

import pytest

from harness.case.catalog import builtin_cases
from harness.idreuse.containers import discover_containers, registry_ints, stack_modules
from harness.runner.inproc import execute_here
from tests.planted import callable_memo, hook_dict_cache

CASES = {c.name: c for c in builtin_cases()}
HOOK_CACHE = "tests.planted.hook_dict_cache._HOOKS['post_build'].<closure first_scale_inv>"
MEMO = "tests.planted.callable_memo.memo.by_module"


@pytest.fixture(autouse=True)
def fresh_registries():
    for stack in (hook_dict_cache.STACK, callable_memo.STACK):
        stack.reset()
    yield
    for stack in (hook_dict_cache.STACK, callable_memo.STACK):
        stack.reset()


@pytest.mark.parametrize("stack, name", [(hook_dict_cache.STACK, HOOK_CACHE), (callable_memo.STACK, MEMO)],
                         ids=["dict-of-hooks", "callable-object"])
def test_a_cache_behind_a_callable_is_discovered_by_its_dotted_path(stack, name):
    found = discover_containers(stack_modules(stack), {"stack": stack})
    assert name in found, sorted(n for n in found if n.startswith("tests."))


@pytest.mark.parametrize("stack, name, dead", [
    (hook_dict_cache.STACK, HOOK_CACHE, ["model.layers[0].weight._data", "model.layers[1].weight._data"]),
    (callable_memo.STACK, MEMO, ["model.layers[0]", "model.layers[1]"]),
], ids=["dict-of-hooks", "callable-object"])
def test_hygiene_names_the_cache_behind_a_callable(stack, name, dead):
    case = CASES["delayed/te-default-init-cast"].with_(steps=1)
    result = execute_here(case, stack)
    hygiene = [f.detail for f in result.failures if f.oracle == "hygiene" and f.model == 0]
    assert hygiene and all(line.startswith(f"{name} key holds id 0x") and "not among its registries()" in line
                           for line in hygiene), result.failures
    assert sorted(line.split(" of dead ")[1].split(" (")[0] for line in hygiene) == dead, hygiene


def test_hooks_that_refer_back_to_their_object_end_the_search():
    """A memo whose bound method is kept among its own attributes: the search stops, each
    container listed once."""
    module = types.ModuleType("planted_memo_cycle")

    class Memo:
        def __init__(self):
            self.seen = {4096 * 8: "x"}
            self.hooks = {"again": self.__call__}

        def __call__(self):
            return self.seen

    Memo.__module__ = "planted_memo_cycle"
    module.memo = Memo()
    found = discover_containers([module])
    assert found["planted_memo_cycle.memo.seen"] is module.memo.seen
    assert registry_ints(found["planted_memo_cycle.memo.seen"]) == {4096 * 8: "key"}
