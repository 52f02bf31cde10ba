"""harness.sentinel on small self-contained suites run through pytester.

Each suite has a toy module with a registry: a leaky one keyed by id() and never pruned
(the plugin must fail the test that leaked), and fixed ones (WeakKeyDictionary, pruned by
weakref.finalize) that must pass silently.
"""

from __future__ import annotations

import builtins
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

TOY_REGISTRY = """
import weakref


class Weight:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Weight({self.name!r})"


LEAKY = {}
WEAK = weakref.WeakKeyDictionary()
PRUNED = {}
_object_id = id  # bound at import, before any test: the plugin's id() wrapper never sees it


class Manager:
    params_by_key = {}
    key_by_param = {}

    @classmethod
    def register(cls, weights, key):
        ids = {id(w) for w in weights}
        cls.params_by_key.setdefault(key, set()).update(ids)
        for weight_id in ids:
            cls.key_by_param[weight_id] = key

    @classmethod
    def reset(cls):
        cls.params_by_key = {}
        cls.key_by_param = {}


def register_leaky(obj, name):
    LEAKY[id(obj)] = name


def register_weak(obj, name):
    WEAK[obj] = name


def register_pruned(obj, name):
    PRUNED[id(obj)] = name
    weakref.finalize(obj, PRUNED.pop, id(obj), None)


def register_leaky_aliased(obj, name):
    LEAKY[_object_id(obj)] = name


def is_registered(obj):
    return id(obj) in LEAKY
"""


@pytest.fixture
def toy(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(toy_registry=TOY_REGISTRY)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *registries: str, extra: tuple[str, ...] = ()) -> pytest.RunResult:
    # The inner suites need neither xdist nor hypothesis; leaving them out saves a second a run.
    args = ["-p", "harness.sentinel", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest",
            "-W", "ignore::pytest.PytestAssertRewriteWarning"]  # the plugin may be imported here already
    for registry in registries:
        args += ["--sentinel-registry", registry]
    return pytester.runpytest(*args, *extra)


def test_leaky_registry_fails_the_test_that_leaked(toy):
    toy.makepyfile(
        test_suite="""
        import toy_registry

        def test_builds_and_drops_a_weight():
            weight = toy_registry.Weight("w0")
            toy_registry.register_leaky(weight, "fwd")

        def test_innocent():
            assert True
        """
    )
    result = run(toy, "toy_registry:LEAKY")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_builds_and_drops_a_weight*",
            "*sentinel: 1 registry entry outlived its object*",
            "*toy_registry:LEAKY key * -> a toy_registry.Weight (key made by id() at *toy_registry.py:*register_leaky*",
            "*Prune the entry when the object dies*",
        ]
    )
    assert "test_innocent" not in "\n".join(line for line in result.stdout.lines if "ERROR at teardown" in line)


def test_weak_key_dictionary_is_silent(toy):
    toy.makepyfile(
        test_suite="""
        import toy_registry

        def test_weak():
            weight = toy_registry.Weight("w0")
            toy_registry.register_weak(weight, "fwd")
        """
    )
    result = run(toy, "toy_registry:WEAK")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*sentinel: no registry entry outlived its object*", "watched: toy_registry:WEAK"])
    assert "outlived its object:" not in result.stdout.str()


def test_registry_pruned_by_finalizer_is_silent(toy):
    toy.makepyfile(
        test_suite="""
        import toy_registry

        def test_pruned():
            for n in range(50):
                weight = toy_registry.Weight(f"w{n}")
                toy_registry.register_pruned(weight, "fwd")
            assert len(toy_registry.PRUNED) == 1
        """
    )
    result = run(toy, "toy_registry:PRUNED")
    result.assert_outcomes(passed=1)


def test_class_attribute_registries_in_the_ini_file(toy):
    toy.makeini(
        """
        [pytest]
        sentinel_registries =
            toy_registry:Manager.params_by_key
            toy_registry:Manager.key_by_param
        """
    )
    toy.makepyfile(
        test_suite="""
        import toy_registry

        def test_model_dies_with_its_ids_registered():
            weights = [toy_registry.Weight(f"w{n}") for n in range(3)]
            toy_registry.Manager.register(weights, "recipe|group")

        def test_reset_cleans_up():
            weights = [toy_registry.Weight("x")]
            toy_registry.Manager.register(weights, "k")
            toy_registry.Manager.reset()
        """
    )
    result = run(toy)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "sentinel: watching 2 registries: toy_registry:Manager.params_by_key, toy_registry:Manager.key_by_param",
            "*ERROR at teardown of test_model_dies_with_its_ids_registered*",
            "*sentinel: 6 registry entries outlived their objects*",
            "*toy_registry:Manager.params_by_key ?'recipe|group'? element *",
            "*toy_registry:Manager.key_by_param key *",
        ]
    )


def test_key_made_without_the_builtin_id_is_found_in_the_heap(toy):
    toy.makepyfile(
        test_suite="""
        import pytest
        import toy_registry

        @pytest.fixture
        def weight():
            yield toy_registry.Weight("held-by-fixture")

        def test_fixture_object(weight):
            toy_registry.register_leaky_aliased(weight, "fwd")
        """
    )
    result = run(toy, "toy_registry:LEAKY")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*toy_registry:LEAKY key * -> a toy_registry.Weight (found at that address by a heap walk*",
            "*repr when last seen alive: Weight('held-by-fixture')*",
        ]
    )


def test_object_that_dies_in_a_later_test_is_reported_there(toy):
    toy.makepyfile(
        test_suite="""
        import pytest
        import toy_registry

        @pytest.fixture(scope="module")
        def shared():
            yield toy_registry.Weight("module-scoped")

        def test_registers(shared):
            toy_registry.register_leaky(shared, "fwd")

        def test_last(shared):
            pass
        """
    )
    result = run(toy, "toy_registry:LEAKY")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_last*", "*during test_suite.py::test_registers*"]
    )


def test_reuse_of_a_dead_address_is_named(toy):
    toy.makepyfile(
        test_suite="""
        import toy_registry
        from harness.idreuse.morgue import land_on, probe_slots, quiet_allocator

        def test_reuse():
            # Collector off from the Weight's birth to its successor's, and the probe list made
            # before the free: nothing else may take the freed block (see land_on).
            with quiet_allocator():
                first = toy_registry.Weight("first")
                toy_registry.register_leaky(first, "fwd")
                address = id(first)
                slots = probe_slots()
                del first
                newcomer = land_on(address, lambda: toy_registry.Weight("second"), slots)
            assert newcomer is not None, "no Weight landed on the freed block"
            assert toy_registry.is_registered(newcomer)  # the dead Weight's entry answers
        """
    )
    result = run(toy, "toy_registry:LEAKY")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*toy_registry:LEAKY key * -> a toy_registry.Weight*",
            "*the address was then reused by a new toy_registry.Weight, while the entry was still there*",
        ]
    )


def test_unresolvable_ints_are_ignored(toy):
    toy.makepyfile(
        test_suite="""
        import toy_registry

        def test_plain_numbers():
            toy_registry.LEAKY[8 * 1_000_003] = "not an address of anything"
            toy_registry.LEAKY[7] = "small"
        """
    )
    result = run(toy, "toy_registry:LEAKY")
    result.assert_outcomes(passed=1)


def test_without_registries_the_plugin_is_inert(toy):
    toy.makepyfile(test_suite="def test_ok():\n    assert True\n")
    result = run(toy)
    result.assert_outcomes(passed=1)
    assert "sentinel" not in result.stdout.str()


@pytest.mark.parametrize(
    "spec, message",
    [
        ("toy_registry", "*is not MODULE:ATTR*"),
        ("toy_registry:", "*is not MODULE:ATTR*"),
        ("no_such_module_here:REG", "*cannot import 'no_such_module_here'*"),
        ("toy_registry:Manager.missing", "*toy_registry.Manager has no attribute 'missing'*check the spelling*"),
    ],
)
def test_bad_registry_is_a_usage_error(toy, spec, message):
    toy.makepyfile(test_suite="def test_ok():\n    assert True\n")
    result = run(toy, spec)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_builtin_id_is_restored_after_the_session(toy):
    toy.makepyfile(test_suite="def test_ok():\n    assert id(1) == id(1)\n")
    original = builtins.id
    run(toy, "toy_registry:LEAKY").assert_outcomes(passed=1)
    assert builtins.id is original


def test_importing_the_plugin_is_cheap():
    code = "import sys, harness.sentinel; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert output.stdout.strip() == "[]"
