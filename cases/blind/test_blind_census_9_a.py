"""The hazards of part A of the ninth blind census (docs/log/2026-12-07-scan-blind-census-9-a.md), reproduced.

Each test works as those of ``test_blind_census_8_a.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control). autodiffx's test is the exception: the library makes
and drops the temporary nodes itself, inside one call, so its test compares the released call
with the same call while every node is kept alive.

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR django-function-cache==1.2 'django<6' 'onnxtr[cpu-headless]==0.9.0' \
        calyxos==0.4.6 simple-singleton==2.0.0 capio==1.0.0 pytem==0.1.0
    pip install --target DIR --no-deps tad-mctc==0.11.3
    pip install --target DIR2 autodiffx==0.2 'numpy<2'
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_9_a.py -q
    PYTHONPATH=DIR2 ./scripts/test cases/blind/test_blind_census_9_a.py -q -k autodiffx

(autodiffx's ``d_n`` calls ``np.math.factorial``, which numpy 2 removed, so its test runs over
numpy 1.26, in a directory of its own.) Every scenario decorates a new function or class and
gives the stores that outlive it a namespace of its own, so that the control cannot hit an
entry of the forced run.
"""

from __future__ import annotations

import gc
import itertools

import numpy as np

from cases.blind.pinned import Pins
from cases.blind.test_blind_census_6_a import _answers
from cases.blind.test_blind_census_7_a import _instance_answer, _memoized_balance
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("django-function-cache==1.2", "onnxtr==0.9.0", "calyxos==0.4.6",
            "simple-singleton==2.0.0", "capio==1.0.0", "autodiffx==0.2", "pytem==0.1.0",
            "tad-mctc==0.11.3")


def test_django_function_cache_returns_a_dead_arguments_result():
    """django_function_cache.py:11-26 (make_hash) keys a call by hash() of every argument that
    is not a container, an int, and cached (:39-81) keeps only the result in Django's cache: an
    argument with identity hash born on a dead argument's address gets the dead one's result."""
    function_cache = PINS.need("django-function-cache", "django_function_cache")
    from django.conf import settings
    from django.core.cache import cache

    if not settings.configured:
        settings.configure(CACHES={"default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache"}})

    def balance(reuse: bool) -> int:
        cache.clear()    # each scenario starts from an empty store
        return _memoized_balance(function_cache.cached, reuse)

    assert balance(reuse=True) == 5     # released: the dead result
    assert balance(reuse=False) == 70   # control


def _page_rendered(elements, reuse: bool) -> str:
    """What a page of the reading-order exporters (onnxtr's, and docTR's, whose code it is)
    renders after its one block is replaced by a block with as many lines: the new block born on
    the replaced one's address when ``reuse``, anywhere else otherwise (the control)."""
    def line(text: str):
        word = elements.Word(text, 0.9, ((0.1, 0.1), (0.5, 0.15)), 0.9,
                             {"value": 0, "confidence": None})
        return elements.Line([word])

    first = line("first")
    kept = seed_pools(lambda: object.__new__(elements.Block))    # the victim's pool, seeded
    page = elements.Page(np.zeros((10, 10, 3), np.uint8),
                         [elements.Block(lines=[first])], 0, (10, 10))
    assert page.render() == "first"     # memoised on the page
    fresh = line("second")
    box = [page.blocks.pop()]
    alive = box[0] if not reuse else None
    if reuse:    # the page's new block is born where the popped one dies
        with quiet_allocator(), born_on_death_of(elements.Block, box) as landing:
            block = elements.Block(lines=[fresh])
        landing.require()
    else:
        block = elements.Block(lines=[fresh])
    page.blocks.append(block)
    del alive, kept
    return page.render()


def test_onnxtr_page_renders_a_dead_blocks_text():
    """onnxtr/io/exporters.py:91-140 memoises a page's reading order on the page under the
    signature (direction, (id(block), len(block.lines)) ...), and the memo keeps new blocks
    built from the lines, never the page's own: a block born on a replaced block's address,
    with as many lines, renders the dead block's text."""
    elements = PINS.need("onnxtr", "onnxtr.io.elements")
    assert _page_rendered(elements, reuse=True) == "first"     # released: the dead block's text
    assert _page_rendered(elements, reuse=False) == "second"   # control


def test_calyxos_stored_node_gives_a_new_instance_a_dead_ones_value():
    """calyxos/core/decorator.py:17-36 keeps each object's graph in the module's _graphs under
    id(obj), never pruned, and a @stored node (:160-213) holds nothing of the object: an
    instance born on a dead one's address reads the dead one's stored value."""
    calyxos = PINS.need("calyxos", "calyxos")
    scenarios = itertools.count()

    def account_class():
        def balance(self) -> int:
            return self.total

        balance.__name__ = f"balance_{next(scenarios)}"    # a node name of its own per scenario

        class Account:
            def __init__(self, total: int):
                self.total = total

            reading = calyxos.stored(balance)

        return Account

    def reading(account) -> int:
        return account.reading()

    assert _instance_answer(account_class(), reading, reuse=True) == 5    # released: the dead value
    assert _instance_answer(account_class(), reading, reuse=False) == 70  # control


def test_simple_singleton_args_returns_a_dead_arguments_instance():
    """simple_singleton/singleton_args.py:16-41 keeps one instance per hash((cls, frozen init
    arguments)), an int: for a new argument with identity hash born on a dead argument's
    address, a class whose __init__ copies what it needs returns the dead one's instance."""
    simple_singleton = PINS.need("simple-singleton", "simple_singleton")

    def memoize(function):
        class Reading(metaclass=simple_singleton.SingletonArgs):
            def __init__(self, account):
                self.value = function(account)    # keeps nothing of the account

        return lambda account: Reading(account).value

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead instance's value
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def _collected(function):
    """``function``, followed by a collection: capio leaves each call's arguments in a reference
    cycle, freed by the collector (as it runs on its own), after which the caller's reference is
    the only one."""
    def call(*args):
        result = function(*args)
        gc.collect()
        return result
    return call


def test_capio_cache_returns_a_dead_arguments_result():
    """capio/capabilities/cache.py:21-48 writes an argument that is not a scalar or container
    into the key as "o{class}@{id(value)}", and the memory backend keeps only the result: an
    argument born on a dead argument's address gets the dead one's result."""
    capio = PINS.need("capio", "capio")
    namespaces = itertools.count()

    def memoize(function):
        return _collected(capio.use.cache(ttl="1h", key_prefix=f"census-{next(namespaces)}")(function))

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_capio_instance_scoped_cache_gives_a_new_instance_a_dead_ones_result():
    """capio/capabilities/cache.py:199-220 with key_scope="instance" writes "@" + str(id(self))
    into the key: an instance born on a dead one's address gets the dead one's result."""
    capio = PINS.need("capio", "capio")
    namespaces = itertools.count()

    def account_class():
        class Account:
            def __init__(self, total: int):
                self.total = total

            @capio.use.cache(ttl="1h", key_scope="instance", key_prefix=f"census-{next(namespaces)}")
            def reading(self) -> int:
                return self.total

        return Account

    reading = _collected(lambda account: account.reading())
    assert _instance_answer(account_class(), reading, reuse=True) == 5    # released: the dead result
    assert _instance_answer(account_class(), reading, reuse=False) == 70  # control


def test_autodiffx_nth_derivative_reads_a_dead_temporarys_entry(monkeypatch):
    """ad/simple_ops.py (Sin._d_n, :44-72, and every op's _d_n) caches a call's derivatives under
    id() of nodes, among them temporaries it makes and drops inside the call, whose entries it
    deletes only when truthy: at x = 0 a temporary born on a dead one's address reads the dead
    one's zero, and the third derivative of sin(sin(x)) comes out -1 for -2. With every node kept
    alive (the control) it is -2."""
    ad = PINS.need("autodiffx", "ad")
    if not hasattr(np, "math"):
        import pytest
        pytest.skip("autodiffx's d_n needs numpy.math (numpy 1.x)")

    def third_derivative() -> float:
        x = ad.Variable("x")
        return ad.Sin(ad.Sin(x)).d_n(3, 0.0)

    released = third_derivative()
    kept = []
    original = ad.ad.Expression.__init__

    def keeping(self, *args, **kwargs):
        original(self, *args, **kwargs)
        kept.append(self)    # no node of the call dies, so no address comes back

    monkeypatch.setattr(ad.ad.Expression, "__init__", keeping)
    control = third_derivative()
    assert released == -1.0    # released: a dead temporary's entry
    assert control == -2.0     # control: the true third derivative


class _LowPass:
    """A first-order low-pass system filter H(omega), as pytem takes one."""

    def __init__(self, cutoff: float):
        self.cutoff = cutoff

    def __call__(self, omega):
        return 1.0 / (1.0 + 1j * omega / (2 * np.pi * self.cutoff))


def test_pytem_forward_uses_a_dead_filters_weights():
    """pytem/forward.py:239-266 caches a system filter's weights at the transform frequencies
    process-wide under a key led by id(system_filter), holding nothing of the filter, and the
    numba path (the default) uses them: a filter born on a dead filter's address gets the dead
    one's weights, so the response is the dead filter's."""
    forward = PINS.need("pytem", "pytem.forward")
    times = np.logspace(-5, -3, 8)

    def response(system_filter):
        return forward.fwd_circle_central([20.0], [100.0, 10.0], 20.0, times,
                                          system_filter=system_filter, use_cuda=False)

    expected = response(_LowPass(5e4))    # the second filter's own response, from an empty entry

    def responses(reuse: bool) -> tuple:
        forward._FILTER_WEIGHTS_CACHE.clear()    # each scenario starts from an empty store
        return _answers(response, lambda: _LowPass(1e4), lambda: _LowPass(5e4),
                        lambda: object.__new__(_LowPass), reuse)

    first, released = responses(reuse=True)
    assert np.allclose(released, first)          # released: the dead filter's response
    assert not np.allclose(released, expected)
    _, control = responses(reuse=False)
    assert np.allclose(control, expected)        # control


def test_tad_mctc_memoize_all_instances_gives_a_new_instance_a_dead_ones_result():
    """tad_mctc/tools/caching.py:100-150 (memoize_all_instances) keeps one cache for all
    instances, keyed by (id(self), name, args, kwargs), and holds only the result: an instance
    born on a dead one's address gets the dead one's result."""
    caching = PINS.need("tad-mctc", "tad_mctc.tools.caching")

    def account_class():
        class Account:
            def __init__(self, total: int):
                self.total = total

            @caching.memoize_all_instances
            def reading(self) -> int:
                return self.total

        return Account

    def reading(account) -> int:
        return account.reading()

    assert _instance_answer(account_class(), reading, reuse=True) == 5    # released: the dead result
    assert _instance_answer(account_class(), reading, reuse=False) == 70  # control
