"""How sure the scan is of each hazard (harness/scan/confidence.py), on a fixture where every
rule that lowers the confidence has a contrast it must leave high: a rule that fired
everywhere, or nowhere, fails here.

Reproduce: python -m harness scan --all --hazards-only tests/scan/fixtures/confidence.py
(and fixtures/confidence_uses.py: the rules that read how an entry is used or how long its
container lasts within a call; fixtures/memoisers.py: memoising decorators)
"""

from __future__ import annotations

import pathlib

import pytest

from harness.scan.finding import Confidence
from harness.scan.finding import Severity
from harness.scan.scanner import scan_paths

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "confidence.py"
USES_FIXTURE = FIXTURE.parent / "confidence_uses.py"

# registry -> (confidence, a word its reason must contain); pairs differ in one respect.
EXPECTED = {
    "BY_WEIGHT": (Confidence.HIGH, "whole process"),
    "_LOOKED_UP": (Confidence.LOW, "only lookups"),
    "table in fill()": (Confidence.LOW, "caller's"),
    "Pickler.memo": (Confidence.LOW, "one phase"),
    "Registry.entries": (Confidence.LOW, "module-level instance"),
    "Layer.key": (Confidence.HIGH, "replaces"),
    "Mode.cache": (Confidence.HIGH, "handed out by current_mode()"),
    "_REGISTERED": (Confidence.LOW, "decorator"),
    "SEEN_ARGS": (Confidence.HIGH, "whole process"),
    "_MATH_IDS": (Confidence.LOW, "namespace"),
    "ITEM_IDS": (Confidence.HIGH, "whole process"),
    "_HANDLER_IDS": (Confidence.LOW, "also held by _HANDLERS"),
    "PLAIN_IDS": (Confidence.HIGH, "whole process"),
    "_CHECKED": (Confidence.LOW, "'is'"),
    "_UNCHECKED": (Confidence.HIGH, "whole process"),
    "_BOUND": (Confidence.LOW, "every call of bind()"),
    "Injector._tag": (Confidence.LOW, "only into text"),
    "_QUEUE_IDS": (Confidence.LOW, "keeps it in _KEPT_QUEUES"),
    "_SEEN_QUEUE_IDS": (Confidence.HIGH, "whole process"),
    "_WEAK_LOOP_IDS": (Confidence.HIGH, "whole process"),
    "Retagger._tag": (Confidence.HIGH, "replaces"),
    "BOUND_ANY": (Confidence.HIGH, "whole process"),
    "_BUFFERS": (Confidence.LOW, "built on group_key()"),
    "SIDE_BUFFERS": (Confidence.HIGH, "whole process"),
    "Backend._batch_id": (Confidence.HIGH, "argument of one call"),
    "Backend._step_id": (Confidence.LOW, "one phase"),
    "Backend._table": (Confidence.HIGH, "argument of one call"),
    "backend.rebuilt_id in rebuild()": (Confidence.HIGH, "argument of one call"),
    "MaskMeta._key": (Confidence.HIGH, "argument of one call"),
    "linecache.cache": (Confidence.LOW, "traceback"),
    "_SOURCES": (Confidence.HIGH, "whole process"),
    "_SIZE_BY_GROUP": (Confidence.LOW, "get_group() hands out"),
    "SIZE_BY_NEW_GROUP": (Confidence.HIGH, "whole process"),
    "_saves() in mark()": (Confidence.HIGH, "module-level state"),
    "_outside_saves() in mark_outside()": (Confidence.LOW, "cannot be seen"),
    "cache in memo_on_stack()": (Confidence.HIGH, "module-level state"),
    "Detector.names": (Confidence.HIGH, "every live object"),
    "Detector.saved": (Confidence.HIGH, "every live object"),
    "Detector.order": (Confidence.LOW, "one phase"),
    "cache in memo_saved_first()": (Confidence.LOW, "first kept as a value"),
    "Collector.names": (Confidence.LOW, "one phase"),
    "Collector.saved": (Confidence.LOW, "only lookups"),
    "cache in _memoize_by_id()": (Confidence.LOW, "every caller keeps it in a local"),
    "cache in memoize_pair()": (Confidence.LOW, "every caller keeps it in a local"),
    "cache in memoize_pair_kept()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "cache in _memoize_kept()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "FROZEN_IDS": (Confidence.LOW, "reset in a finally"),
    "SEEN_IDS": (Confidence.LOW, "another object"),
    "config_kwargs in config_identifier()": (Confidence.HIGH, "identifier made of the mapping"),
    "settings in config_description()": (Confidence.LOW, "caller's"),
}


# The same for the rules that read how an entry is used (a stale entry nobody sees) or how long
# a container lasts within a call (emptied in a finally, kept in thread-local storage).
EXPECTED_USES = {
    "REPR_CONTEXT.seen": (Confidence.LOW, "emptied in a finally"),
    "REPR_CONTEXT.stats": (Confidence.HIGH, "whole process"),
    "Graph.nodes": (Confidence.LOW, "one phase"),
    "table in Graph.hook_table()": (Confidence.LOW, "installed or kept, but not as a memo"),
    "source_lines": (Confidence.LOW, "traceback"),
    "_OWN_SOURCES": (Confidence.HIGH, "whole process"),
    "Pool._acquired": (Confidence.LOW, "is_debug (default False)"),
    "Pool._traced": (Confidence.LOW, "module-level instance"),
    "_WARNED": (Confidence.LOW, "warning"),
    "_PATCHED": (Confidence.HIGH, "whole process"),
    "_HOOKED": (Confidence.HIGH, "whole process"),
    "_WARNED_IN_BLOCK": (Confidence.LOW, "warning"),
    "_SKIPPED_IN_BLOCK": (Confidence.HIGH, "whole process"),
    "_SESSION_CLASSES": (Confidence.LOW, "the same value, Session"),
    "_HOOKED_FLAGS": (Confidence.HIGH, "whole process"),
    "_EVAL_MEMO": (Confidence.LOW, "reset in a finally"),
    "_KEPT_MEMO": (Confidence.HIGH, "whole process"),
    "_STORAGES": (Confidence.LOW, "clock reading"),
    "_PLAIN_STORAGES": (Confidence.HIGH, "whole process"),
    "_local.torch['loss_mapping'] (thread-local)": (Confidence.HIGH, "thread-local storage"),
    "run._plain.torch['loss_mapping'] in map_plain()": (Confidence.LOW, "caller's"),
    "Patches._helpers": (Confidence.LOW, "what a new one would be"),
    "Patches._unchecked": (Confidence.HIGH, "whole process"),
    "REPR_CONTEXT.stats_once": (Confidence.LOW, "emptied in a finally"),
    "REPR_CONTEXT.stats_kept": (Confidence.LOW, "another object"),
    "Journal._written": (Confidence.LOW, "nothing reads"),
    "Journal.shown": (Confidence.LOW, "module-level instance"),
    "stamps in keep_hooks()": (Confidence.LOW, "nothing reads"),
    "stamps in keep_read_hooks()": (Confidence.LOW, "installed or kept, but not as a memo"),
    "Runner._handled": (Confidence.HIGH, "caught by the handler"),
    "Runner._seen_tasks": (Confidence.LOW, "one phase"),
    "RecordTracker._refs": (Confidence.HIGH, "only through weakref.ref"),
    "CheckedTracker._refs": (Confidence.LOW, "one phase"),
    "chosen in identity_predicate()": (Confidence.LOW, "objects of the call that made the container"),
    "results in memo_by_argument()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "shapes in summarize()": (Confidence.LOW, "only handed to model.register_forward_hook()"),
    "_NOTED": (Confidence.LOW, "nothing reads"),
    "NOTED": (Confidence.HIGH, "whole process"),
}
# Memoising decorators (fixtures/memoisers.py): keys made by a nested function or a helper
# given the arguments, read through a comprehension over the wrapper's arguments, hashed from
# *args or from a local grown over them, digested, and stores made through the cache's own
# get/set or a setter named by its verb; each beside its contrast.
MEMO_FIXTURE = FIXTURE.parent / "memoisers.py"
EXPECTED_MEMO = {
    "_PerArguments._instances": (Confidence.HIGH, "classes live for the whole process"),
    "_Counted._seen": (Confidence.LOW, "one phase"),
    "cache": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "region_cache": (Confidence.LOW, "this is no memo"),
    "cache in memo_by_key_maker()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "results in memo_over_own_arguments()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "chosen in memo_over_maker_arguments()": (Confidence.LOW, "that one call was given"),
    "ResultCache._results": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "NoteCache._notes": (Confidence.LOW, "one phase"),
    "in_progress in guarded_by_removal()": (Confidence.LOW, "removes it again"),
    "started in guarded_never_removed()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "DIGESTS": (Confidence.HIGH, "whole process"),
    "SEEN_CALLS": (Confidence.LOW, "this is no memo"),
    "TimedCache._values": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "TimedCache._times": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "cache in memo_in_foreign_cache.decorator()": (Confidence.HIGH, "wrapper() calls func()"),
    # contrast: keep_read_hooks() in confidence_uses.py, a kept closure that wraps nothing (low)
    "tied in retie_after_init()": (Confidence.HIGH, "which is kept and calls init_fn()"),
    # keys made of the arguments by a helper, a grown local or a digest; a setter named by its verb
    "results in memo_through_key_helper()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "kept in memo_by_grown_key()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "stored in memo_by_digest()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "table in memo_in_foreign_table.decorator()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "PropertyCache.values": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "_PLANS": (Confidence.LOW, "this is no memo"),
}
# Entries removed when their object dies (safe, not listed), keys made by a factory that
# keeps every object it numbers, and weak-valued registries (fixtures/pruned_and_pinned.py).
PRUNED_FIXTURE = FIXTURE.parent / "pruned_and_pinned.py"
EXPECTED_PRUNED = {
    "OPEN_HANDLES": (Confidence.HIGH, "whole process"),
    "_VAR_NOTES": (Confidence.HIGH, "whole process"),
    "CODE_RESULTS": (Confidence.LOW, "keeps each such object"),
    "PLAIN_RESULTS": (Confidence.HIGH, "whole process"),
    "_LIVE_LOCKS": (Confidence.LOW, "WeakValueDictionary"),
    "_LOCKS": (Confidence.HIGH, "whole process"),
    "Proxies._all": (Confidence.LOW, "WeakValueDictionary"),
    "_SAVED_ATTRIBUTES": (Confidence.LOW, "a callback the code hands on"),
    "_RUNNING": (Confidence.LOW, "a callback the code hands on"),
    "_NEWEST": (Confidence.HIGH, "whole process"),
    "_LAST_STYLE_ID": (Confidence.HIGH, "whole process"),
    "_TRACKED": (Confidence.LOW, "a weak reference to the keyed object"),
    "_SEEN_ARRAYS": (Confidence.HIGH, "whole process"),
    "_REPOS": (Confidence.LOW, "a weak reference to the keyed object"),
}
# Memoisers whose results live in a client's store, a storage the maker is given, behind a
# service method or a descriptor, with keys hashed in a comprehension, a grown list or a
# growing sum (fixtures/memo_stores.py); each beside its contrast.
STORES_FIXTURE = FIXTURE.parent / "memo_stores.py"
EXPECTED_STORES = {
    "backend in cached_per_instance.wrapper()": (Confidence.HIGH, "handed out by get_backend()"),
    "ClientLRU.client": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "storage in memo_in_given_storage()": (Confidence.HIGH, "which is kept and calls func()"),
    "client in memo_fetching_its_client.wrapper()": (Confidence.HIGH, "a memo kept as long as the wrapper"),
    "client in lookup_fetching_its_client()": (Confidence.LOW, "this is no memo"),
    "CacheService._client": (Confidence.HIGH, "a function it is given"),
    "ValueService._client": (Confidence.LOW, "one phase"),
    "CachedAttribute.store": (Confidence.HIGH, "a descriptor lives as long as its class"),
    "OwnerNotes.store": (Confidence.LOW, "one phase"),
    "obj.results in cached_on_instance.wrapper()": (Confidence.LOW, "the caller's"),
}
TABLES = {
    FIXTURE: EXPECTED, USES_FIXTURE: EXPECTED_USES, MEMO_FIXTURE: EXPECTED_MEMO, PRUNED_FIXTURE: EXPECTED_PRUNED,
    STORES_FIXTURE: EXPECTED_STORES,
}


def _reproduce(fixture: pathlib.Path) -> str:
    return f"python -m harness scan --all --hazards-only {fixture}"


@pytest.fixture(scope="module")
def hazards():
    found = {}
    for fixture in TABLES:
        result = scan_paths([str(fixture)])
        found[fixture] = {f.name: f for f in result.registries if f.severity is Severity.HAZARD}
    return found


@pytest.mark.parametrize("fixture", sorted(TABLES), ids=lambda path: path.name)
def test_every_hazard_of_the_fixture_is_expected(hazards, fixture):
    assert sorted(hazards[fixture]) == sorted(TABLES[fixture]), _reproduce(fixture)


@pytest.mark.parametrize("fixture, name", [(f, n) for f, table in TABLES.items() for n in sorted(table)], ids=lambda value: value.name if isinstance(value, pathlib.Path) else value)
def test_confidence_and_its_reason(hazards, fixture, name):
    confidence, word = TABLES[fixture][name]
    finding = hazards[fixture][name]
    assert finding.confidence is confidence, f"{name}: {finding.confidence_reason}\nreproduce: {_reproduce(fixture)}"
    assert word in finding.confidence_reason, f"{name}: {finding.confidence_reason}\nreproduce: {_reproduce(fixture)}"


def test_a_decorator_class_keeps_its_cache_with_high_confidence():
    # Beside Pickler.memo above (an instance keyed by objects passed to it: low), the same
    # shape whose __call__ calls the function the instance wraps is a decorator's cache.
    fixture = FIXTURE.parent / "memo_decorators.py"
    result = scan_paths([str(fixture)])
    found = {f.name: f for f in result.registries if f.severity is Severity.HAZARD}
    assert found["memoize.cache"].confidence is Confidence.HIGH, found["memoize.cache"].confidence_reason
    assert "decorator" in found["memoize.cache"].confidence_reason


def test_a_registry_on_a_replaced_module_attribute_lives_for_one_phase():
    # state.graph is assigned anew (compile_one), state.config never: the registry on the
    # graph dies with each graph, the one on the config lives for the whole process.
    fixture = FIXTURE.parent / "rebound_attributes.py"
    result = scan_paths([str(fixture)])
    found = {f.name: f for f in result.registries if f.severity is Severity.HAZARD}
    assert found["state.graph.seen"].confidence is Confidence.LOW, found["state.graph.seen"].confidence_reason
    assert found["state.config.seen"].confidence is Confidence.HIGH, found["state.config.seen"].confidence_reason


def test_a_register_function_called_in_other_files_with_module_level_functions_is_low():
    # register() is called only from users.py, with a module-level function: low; note() is
    # called there with an object made at run time: high. Both tables come from getters of
    # the module's own state.
    fixture = FIXTURE.parent.parent / "registered_elsewhere"
    result = scan_paths([str(fixture)])
    found = {f.name: f for f in result.registries if f.severity is Severity.HAZARD}
    registered, noted = found["_get_table() in register()"], found["_get_notes() in note()"]
    assert registered.confidence is Confidence.LOW, registered.confidence_reason
    assert "every call of register()" in registered.confidence_reason
    assert noted.confidence is Confidence.HIGH, noted.confidence_reason
    assert "module-level state" in noted.confidence_reason


def test_a_registry_only_in_a_conftest_is_test_code(tmp_path):
    # The same module-level registry, in a conftest.py (collected by pytest: low) and in a
    # plain module (high).
    source = "INIT_ARGS = {}\n\n\ndef remember(resource, args):\n    INIT_ARGS[id(resource)] = args\n\n\ndef args_of(resource):\n    return INIT_ARGS.get(id(resource))\n"
    for name in ("conftest.py", "helpers.py"):
        (tmp_path / name.replace(".py", "")).mkdir()
        (tmp_path / name.replace(".py", "") / name).write_text(source)
    found = {}
    for finding in scan_paths([str(tmp_path)]).registries:
        found[pathlib.Path(finding.first.path).name] = finding
    assert found["conftest.py"].confidence is Confidence.LOW, found["conftest.py"].confidence_reason
    assert "test module" in found["conftest.py"].confidence_reason
    assert found["helpers.py"].confidence is Confidence.HIGH, found["helpers.py"].confidence_reason


def test_sys_modules_written_under_an_id_made_name_is_low_unless_looked_up(tmp_path):
    # A loader that writes each new module into sys.modules under a name made from id(self)
    # (low: nothing looks a module up by such a name) beside one that looks the name up first
    # and hands back the module it finds (high: a new system on a dead one's address gets the
    # dead one's module). Each in its own directory: sys.modules is one registry per scan.
    written = (
        "import importlib.util\nimport sys\n\n\nclass System:\n    def load(self, path):\n"
        "        name = f\"{id(self)}_{path}\"\n        spec = importlib.util.spec_from_file_location(name, path)\n"
        "        module = importlib.util.module_from_spec(spec)\n        sys.modules[name] = module\n"
        "        spec.loader.exec_module(module)\n        return module\n"
    )
    looked_up = written.replace(
        "        spec = importlib", "        if name in sys.modules:\n            return sys.modules[name]\n        spec = importlib"
    )
    found = {}
    for kind, source in (("written", written), ("looked_up", looked_up)):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "loader.py").write_text(source)
        registries = [f for f in scan_paths([str(tmp_path / kind)]).registries if f.severity is Severity.HAZARD]
        assert [f.name for f in registries] == ["sys.modules"], registries
        found[kind] = registries[0]
    assert found["written"].confidence is Confidence.LOW, found["written"].confidence_reason
    assert "never looked up" in found["written"].confidence_reason
    assert found["looked_up"].confidence is Confidence.HIGH, found["looked_up"].confidence_reason
