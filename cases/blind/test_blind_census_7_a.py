"""The hazards of part A of the seventh blind census (docs/log/2026-12-07-scan-blind-census-7-a.md), reproduced.

Each test works as those of ``test_blind_census_6_a.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control). Part A of the census found twenty-three true hazards (one of them only
through the scan output); each has its test here.

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR lruheap==1.3.1 cachefunc==0.2.6 py-cache==0.3.2 \
        jk-cachefunccalls==0.2023.2.8 varcache==0.1.0 walrus==0.9.8 fakeredis \
        autoray==0.11.0 callback-lru-cache==0.0.7 lru-method-cache==0.2.0 cachez==0.1.2 \
        dontforget==0.0.2 nemoize==0.1.0 bamboo-stash==0.1.3 cachemeoutside==1.0.0 \
        outcache==1.0.1 toolcache==0.5.0 lucidcache==1.0 shelve-cache==0.0.4 yacache==0.1.5 \
        dcache==0.0.2 classic-cache==1.2.1 disk-cached==0.1.0 cool-cache==0.4.0
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_7_a.py -q

Every test makes the next object itself (an argument, an instance, an array) and places it on
the dead one's address with ``reborn``, after seeding the first one's size class.
Everything the library runs is released code, unchanged.
"""

from __future__ import annotations

import itertools
import threading
import warnings

from cases.blind.pinned import Pins, reborn
from cases.blind.test_blind_census_6_a import _Account, _answers, _balance
from harness.idreuse.landing import seed_pools

PINS = Pins("lruheap==1.3.1", "cachefunc==0.2.6", "py-cache==0.3.2",
            "jk-cachefunccalls==0.2023.2.8", "varcache==0.1.0", "walrus==0.9.8",
            "autoray==0.11.0", "callback-lru-cache==0.0.7", "lru-method-cache==0.2.0",
            "cachez==0.1.2", "dontforget==0.0.2", "nemoize==0.1.0", "bamboo-stash==0.1.3",
            "cachemeoutside==1.0.0", "outcache==1.0.1", "toolcache==0.5.0", "lucidcache==1.0",
            "shelve-cache==0.0.4", "yacache==0.1.5", "dcache==0.0.2", "classic-cache==1.2.1",
            "disk-cached==0.1.0", "cool-cache==0.4.0")


def _instance_answer(cls, read, reuse: bool) -> int:
    """What ``read`` gives for a second instance of ``cls`` (balance 70), made after the first
    (balance 5) is dropped (``reuse``) or while it is kept alive (the control)."""
    first, result = _answers(read, lambda: cls(5), lambda: cls(70),
                             lambda: object.__new__(cls), reuse)
    assert first == 5
    return result


def _memoized_balance(memoize, reuse: bool) -> int:
    """The balance a memoized reader gives for a second account, made after the first is dropped.
    Each call decorates a new function, so that no cache outlives one scenario."""
    def balance(account: _Account) -> int:
        return _balance(account)

    first, result = _answers(memoize(balance), lambda: _Account(5), lambda: _Account(70),
                             lambda: object.__new__(_Account), reuse)
    assert first == 5
    return result


def test_lruheap_lru_cache_returns_a_dead_arguments_result():
    """lru/utils.py:19-26 keys a call by hash((args, kwargs)), an int, and lru_cache
    (decorators.py:12-41) keeps only the result under it: an argument with identity hash born on
    a dead argument's address gets the dead one's result."""
    decorators = PINS.need("lruheap", "lru.decorators")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # lru_cache calls its own deprecated get_cache()
        assert _memoized_balance(decorators.lru_cache(capacity=128), reuse=True) == 5    # released
        assert _memoized_balance(decorators.lru_cache(capacity=128), reuse=False) == 70  # control


def test_cachefunc_returns_a_dead_arguments_result():
    """cachefunc/cache/base.py:30-35 keys a call by hash(qualname + the arguments' str(id())), and
    DictCache (dict_cache.py:17-25) keeps only the result: any argument born on a dead argument's
    address gets the dead one's result."""
    main = PINS.need("cachefunc", "cachefunc.main")
    from cachefunc.cache.dict_cache import DictCache

    def memoize(function):
        return main.cachefunc(cache=DictCache())(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_py_cache_returns_a_dead_arguments_result():
    """pycache/_cache/_memmory_db.py:62-79 keys a call by hash() of the arguments (an unhashable
    one by its id()), and FunctionCache keeps only the result, in the process-wide DataCache:
    an argument with identity hash born on a dead argument's address gets the dead one's result."""
    pycache = PINS.need("py-cache", "pycache")

    def memoize(function):
        return pycache.cache(expires_every="01:00:00")(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_jk_cachefunccalls_returns_a_dead_arguments_result():
    """jk_cachefunccalls/cacheCalls.py:32-87 identifies the argument named by dependArgs by
    str(id()) and keeps the last call's result for ``seconds``: an argument born on the dead
    argument's address within that time gets the dead one's result."""
    jk = PINS.need("jk-cachefunccalls", "jk_cachefunccalls")

    def memoize(function):
        return jk.cacheCalls(seconds=3600, dependArgs=[0])(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_varcache_saves_a_new_object_under_a_dead_objects_name(tmp_path):
    """varcache/__init__.py:11-86 binds names to id(obj) and does not hold the object: a list
    born on the address of a loaded list that was dropped counts as bound, and save() writes it
    under the dead list's name (an unbound object should raise)."""
    varcache = PINS.need("varcache", "varcache")

    def bound_as(reuse: bool, directory) -> bool:
        directory.mkdir()
        store = varcache.Varcache(str(directory))
        kept = seed_pools(list)
        box = [store.load("scores", list)]
        alive = box[0] if not reuse else None
        later = reborn(box, lambda: [1, 2, 3]) if reuse else [1, 2, 3]
        result = store.check_object(later)
        if result:
            store.save(later)
        del alive, kept
        return result

    assert bound_as(True, tmp_path / "reuse") is True                   # released
    assert (tmp_path / "reuse" / "scores").exists()                     # saved as the dead list
    assert bound_as(False, tmp_path / "control") is False               # control
    assert not (tmp_path / "control" / "scores").exists()


class _Clock:
    """The walrus docstring's example: a stateless object whose cached property reads a clock."""


_TICKS = itertools.count(1)


def _tick(clock: _Clock) -> int:
    return next(_TICKS)


def test_walrus_cached_property_gives_a_new_instance_a_dead_ones_value():
    """walrus/cache.py:253-293 keys a cached property by md5(pickle of (id(instance), args)) in
    Redis: an instance of equal state born on a dead instance's address reads the dead one's
    value (the docstring's Clock.now: the dead clock's time)."""
    walrus = PINS.need("walrus", "walrus")
    import fakeredis

    def reading(reuse: bool) -> tuple:
        _Clock.now = walrus.Cache(fakeredis.FakeRedis()).cached_property()(_tick)
        try:
            return _answers(lambda clock: clock.now, _Clock, _Clock,
                            lambda: object.__new__(_Clock), reuse)
        finally:
            del _Clock.now

    first, result = reading(reuse=True)
    assert result == first                     # released: the dead clock's reading
    first, result = reading(reuse=False)
    assert result != first                     # control: a reading of its own


def _filled(value: float):
    """A numpy array of three ``value``s, its object allocated first (np.full allocates the
    fill value's array before the result's)."""
    import numpy as np
    array = np.empty(3)
    array.fill(value)
    return array


def test_autoray_shared_intermediates_return_a_dead_arrays_result():
    """autoray/lazy/core.py:1142-1185 keys a lazily cached op by id() of its array arguments in
    the shared_intermediates cache, and a result, once computed, lets go of its arguments
    (:453-468): a numpy array born on a dead argument's address gets the dead one's product."""
    autoray = PINS.need("autoray", "autoray")
    import numpy as np
    lazy = autoray.lazy

    def product(reuse: bool) -> list:
        with lazy.shared_intermediates():
            x = lazy.array(np.ones(3))
            first, result = _answers(lambda arr: (x * arr).compute().tolist(),
                                     lambda: _filled(2.0), lambda: _filled(5.0),
                                     lambda: np.empty(3), reuse)
        assert first == [2.0, 2.0, 2.0]
        return result

    assert product(reuse=True) == [2.0, 2.0, 2.0]    # released: the dead array's product
    assert product(reuse=False) == [5.0, 5.0, 5.0]   # control


def test_callback_lru_cache_returns_a_dead_arguments_result():
    """callback_lru_cache/lru_cache.py:6-29 keys a call by hash() of its argument and keeps only
    the result: an argument with identity hash born on a dead argument's address gets the dead
    one's result."""
    lru_cache = PINS.need("callback-lru-cache", "callback_lru_cache").lru_cache
    assert _memoized_balance(lru_cache(128), reuse=True) == 5     # released
    assert _memoized_balance(lru_cache(128), reuse=False) == 70   # control


class _SlottedAccount:
    """An instance without weak reference support, as any class with __slots__ is."""

    __slots__ = ("balance",)

    def __init__(self, balance: int):
        self.balance = balance


def test_lru_method_cache_gives_a_new_instance_a_dead_ones_results():
    """lru_method_cache.py:105-147 keeps each instance's cache under id(obj) and removes it by
    weakref.finalize; an instance that cannot be weakly referenced is only warned about, and an
    instance born on its address after it dies gets its cached results."""
    lru_method_cache = PINS.need("lru-method-cache", "lru_method_cache").lru_method_cache

    def balance(reuse: bool) -> int:
        class Account(_SlottedAccount):
            __slots__ = ()

            @lru_method_cache
            def read(self) -> int:
                return self.balance

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")    # "will not be cleaned up automatically"
            return _instance_answer(Account, lambda account: account.read(), reuse)

    assert balance(reuse=True) == 5     # released: the dead instance's result
    assert balance(reuse=False) == 70   # control


def test_cachez_returns_a_dead_arguments_result():
    """cachez.py:69-129 keys a call by (hash(frozenset(args)), hash(frozenset(kwargs))) in the
    process-wide Cache._cache and keeps only the result: an argument with identity hash born on
    a dead argument's address gets the dead one's result."""
    cachez = PINS.need("cachez", "cachez")
    cachez.Cache.clear_cache()
    assert _memoized_balance(cachez.Cache.cache, reuse=True) == 5     # released
    assert _memoized_balance(cachez.Cache.cache, reuse=False) == 70   # control


def test_dontforget_returns_a_dead_arguments_stored_result(tmp_path):
    """dontforget.py:88-107 keys a call by a blake2b of the arguments' hash() values and stores
    only the result (index.db): an argument with identity hash born on a dead argument's address
    gets the dead one's stored result."""
    dontforget = PINS.need("dontforget", "dontforget")

    def memoize_in(directory):
        def memoize(function):
            dontforget.set_storage_directory(directory)
            return dontforget.cached(function)
        return memoize

    assert _memoized_balance(memoize_in(tmp_path / "reuse"), reuse=True) == 5        # released
    assert _memoized_balance(memoize_in(tmp_path / "control"), reuse=False) == 70    # control


def test_nemoize_memoized_class_returns_a_dead_arguments_instance():
    """nemoize/memoize.py:70-108 (Memoized: a memoized class, and any function memoized with
    arguments, ``@memoize()``) keys a call by hash(hash(args)), an int, and keeps only the
    result: an argument with identity hash born on a dead argument's address gets the instance
    made for the dead one. (A function memoized as ``@memoize`` goes to functools.lru_cache.)"""
    memoize = PINS.need("nemoize", "nemoize").memoize

    def total(reuse: bool) -> int:
        @memoize
        class Statement:
            def __init__(self, account: _Account):
                self.total = account.balance

        first, result = _answers(lambda account: Statement(account).total, lambda: _Account(5),
                                 lambda: _Account(70), lambda: object.__new__(_Account), reuse)
        assert first == 5
        return result

    assert total(reuse=True) == 5                                  # released: the dead one's
    assert total(reuse=False) == 70                                # control
    assert _memoized_balance(memoize(), reuse=True) == 5           # @memoize() on a function
    assert _memoized_balance(memoize(), reuse=False) == 70


def test_bamboo_stash_returns_a_dead_arguments_stored_result(tmp_path):
    """bamboo_stash/stash.py:125-140 condenses a non-pandas argument to its hash() and names the
    stored result's file after that digest: an argument with identity hash born on a dead
    argument's address gets the dead one's stored result."""
    bamboo_stash = PINS.need("bamboo-stash", "bamboo_stash")

    def memoize_in(directory):
        return bamboo_stash.Stash(directory)

    assert _memoized_balance(memoize_in(tmp_path / "reuse"), reuse=True) == 5        # released
    assert _memoized_balance(memoize_in(tmp_path / "control"), reuse=False) == 70    # control


def test_cachemeoutside_returns_a_dead_arguments_result():
    """cacheMeOutside/cacheMeOutside.py:7-8, :76-90 keys a call by hash((args, kwargs)) in a dict
    that every Cache shares (a class attribute) and keeps only the result: an argument with
    identity hash born on a dead argument's address gets the dead one's result."""
    module = PINS.need("cachemeoutside", "cacheMeOutside.cacheMeOutside")
    module.Cache.cache.clear()
    assert _memoized_balance(module.cacheMe(), reuse=True) == 5     # released: the dead result
    module.Cache.cache.clear()
    assert _memoized_balance(module.cacheMe(), reuse=False) == 70   # control


def test_outcache_gives_a_new_instance_a_dead_ones_result():
    """outcache/cache.py:28-51 keys a method call by f"{id(self)}/{name}/{args}" in a list every
    Cache shares and keeps only a copy of the result: an instance born on a dead instance's
    address within the time to live gets the dead one's result."""
    outcache = PINS.need("outcache", "outcache")

    def balance(reuse: bool) -> int:
        outcache.Cache._cache.clear()

        class Ledger(_Account):
            @outcache.Cache(minutes=60)
            def read(self) -> int:
                return self.balance

        return _instance_answer(Ledger, lambda ledger: ledger.read(), reuse)

    assert balance(reuse=True) == 5     # released: the dead instance's result
    assert balance(reuse=False) == 70   # control


def test_toolcache_returns_a_dead_arguments_result():
    """toolcache/hash_utils.py:10-46 replaces an argument that is not JSON by its hash() before
    hashing the call, and the memory cache keeps only the result: an argument with identity
    hash born on a dead argument's address gets the dead one's result."""
    toolcache = PINS.need("toolcache", "toolcache")
    assert _memoized_balance(toolcache.cache("memory"), reuse=True) == 5     # released
    assert _memoized_balance(toolcache.cache("memory"), reuse=False) == 70   # control


def test_lucidcache_returns_a_dead_arguments_result():
    """lucidcache/__init__.py:3-42 keys a call by hash((id(func), hash() of each argument, ...)) in
    a module dict and keeps only the result: an argument with identity hash born on a dead
    argument's address gets the dead one's result."""
    lucidcache = PINS.need("lucidcache", "lucidcache")
    assert _memoized_balance(lucidcache.cacheable, reuse=True) == 5     # released
    assert _memoized_balance(lucidcache.cacheable, reuse=False) == 70   # control


def test_shelve_cache_returns_a_dead_arguments_result(tmp_path):
    """shelvecache/shelvecache.py:25-41 keys a call by str(hash(functools._make_key(args))), in a
    dict and in a shelve file, and keeps only the result: an argument with identity hash born on
    a dead argument's address gets the dead one's result."""
    shelvecache = PINS.need("shelve-cache", "shelvecache")

    def memoize_in(path):
        return shelvecache.persistent_cache(str(path))

    assert _memoized_balance(memoize_in(tmp_path / "reuse"), reuse=True) == 5        # released
    assert _memoized_balance(memoize_in(tmp_path / "control"), reuse=False) == 70    # control


def test_yacache_returns_a_dead_arguments_result():
    """yacache/cache.py:8-47 keys a call by hash() of a JSON text holding str(hash(frozenset(args)))
    and keeps only (a copy of) the result: an argument with identity hash born on a dead
    argument's address gets the dead one's result."""
    yacache = PINS.need("yacache", "yacache")
    assert _memoized_balance(yacache.cache(), reuse=True) == 5     # released: the dead result
    assert _memoized_balance(yacache.cache(), reuse=False) == 70   # control


def test_dcache_returns_a_dead_arguments_result():
    """dcache/keys.py:1-9 keys a call by hash(args + (func,) + kwargs items), an int, and the
    in-memory backend (dcache.py:18-38) keeps only the result: an argument with identity hash
    born on a dead argument's address gets the dead one's result."""
    dcache = PINS.need("dcache", "dcache")
    assert _memoized_balance(dcache.Dcache(), reuse=True) == 5     # released: the dead result
    assert _memoized_balance(dcache.Dcache(), reuse=False) == 70   # control


def test_classic_cache_returns_a_dead_arguments_result():
    """classic/cache/key_generators/pure_hash.py:14-29 (the InMemoryCache's default key function)
    keys a method call by hash() of its arguments, and the cache keeps only the serialised result:
    an argument with identity hash born on a dead argument's address gets the dead one's result."""
    decorator = PINS.need("classic-cache", "classic.cache")
    from classic.cache.caches.in_memory import InMemoryCache

    def balance(reuse: bool) -> int:
        class Ledger:
            def __init__(self):
                self.cache = InMemoryCache()

            def read(self, account):
                return account.balance

            # the decorator reads the return annotation, which must be a type, not a string
            read.__annotations__ = {"account": _Account, "return": int}
            read = decorator.cached()(read)

        ledger = Ledger()
        first, result = _answers(ledger.read, lambda: _Account(5), lambda: _Account(70),
                                 lambda: object.__new__(_Account), reuse)
        assert first == 5
        return result

    assert balance(reuse=True) == 5     # released: the dead argument's result
    assert balance(reuse=False) == 70   # control


def test_disk_cached_property_gives_a_new_instance_a_dead_ones_value(tmp_path):
    """disk_cached/cache_manager.py:44-69 keys a cached property by (name, id(instance)) in a
    diskcache store, which keeps the value only: an instance born on a dead instance's address
    reads the dead one's value (the store also outlives the process)."""
    cache_manager = PINS.need("disk-cached", "disk_cached.cache_manager")

    def balance(reuse: bool, directory) -> int:
        manager = cache_manager.DiskCacheManager(cache_path=str(directory))

        class Ledger(_Account):
            @manager.cache_property
            def total(self) -> int:
                return self.balance

        try:
            return _instance_answer(Ledger, lambda ledger: ledger.total, reuse)
        finally:
            manager.cache.close()

    assert balance(True, tmp_path / "reuse") == 5        # released: the dead instance's value
    assert balance(False, tmp_path / "control") == 70    # control


class _Client:
    """An argument pickle cannot copy (it holds a lock, as clients holding locks or sockets do)."""

    def __init__(self, balance: int):
        self.balance = balance
        self.lock = threading.Lock()


def test_cool_cache_returns_a_dead_unpicklable_arguments_result():
    """The super_hash that cool-cache vendors (super_hash/__init__.py:240-321) hashes an argument
    pickle cannot copy by its id(), memoised in the module-level _non_iterable_cache, and the
    cache keeps the result under that hash: such an argument born on a dead one's address gets
    the dead one's result."""
    cool_cache = PINS.need("cool-cache", "cool_cache")

    def balance(reuse: bool) -> int:
        @cool_cache.cache(folder=None)      # the in-memory cache; the disk one keys alike
        def read(client: _Client) -> int:
            return client.balance

        first, result = _answers(read, lambda: _Client(5), lambda: _Client(70),
                                 lambda: object.__new__(_Client), reuse)
        assert first == 5
        return result

    assert balance(reuse=True) == 5     # released: the dead argument's result
    assert balance(reuse=False) == 70   # control
