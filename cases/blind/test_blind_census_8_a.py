"""The hazards of part A of the eighth blind census (docs/log/2026-12-07-scan-blind-census-8-a.md), reproduced.

Each test works as those of ``test_blind_census_7_a.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control). Part A of the census found twelve true hazards; each has
its test here.

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR python-redis-caching==0.0.6 pi-cache==0.5.5 \
        redis-cache-toolkit==0.1.0 redis-lru==0.1.2 symphra-cache==0.1.0 smart-cache==1.0.3 \
        twat-cache[all]==2.7.5 cachingutils==1.0.7 \
        circuitpython-functools==3.0.2 cachemethod==1.0.0 backlite==0.0.6 \
        pysqlite3-binary fakeredis
    pip install --target DIR --no-deps --ignore-requires-python remembers==0.1.0
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_8_a.py -q

(remembers declares Python 3.12 or later and runs unchanged on 3.11. backlite's schema uses
SQLite's unixepoch('subsec'), which needs SQLite 3.42; where the standard library's sqlite3 is
older, its test runs the released code over pysqlite3-binary in its place.) The Redis-backed caches
run over a ``fakeredis`` database, a new one per scenario, so that the control cannot hit an
entry of the forced run; every scenario decorates a new function or class.
"""

from __future__ import annotations

import itertools
import sqlite3
import sys

from cases.blind.pinned import Pins
from cases.blind.test_blind_census_6_a import _answers
from cases.blind.test_blind_census_7_a import _instance_answer, _memoized_balance

PINS = Pins("python-redis-caching==0.0.6", "pi-cache==0.5.5", "redis-cache-toolkit==0.1.0",
            "redis-lru==0.1.2", "symphra-cache==0.1.0", "smart-cache==1.0.3",
            "twat-cache==2.7.5", "remembers==0.1.0", "cachingutils==1.0.7",
            "circuitpython-functools==3.0.2", "cachemethod==1.0.0",
            "backlite==0.0.6")


def test_python_redis_caching_returns_a_dead_arguments_result():
    """redis_cache/cache_manager.py:21-28 stores use_cache's result in Redis under
    f'{key}_{hash(args)}' and holds nothing of the arguments: an argument with identity hash
    born on a dead argument's address gets the dead one's result."""
    manager_module = PINS.need("python-redis-caching", "redis_cache.cache_manager")
    import fakeredis

    def memoize(function):
        manager = manager_module.CacheManager("localhost")
        manager._redis_cli = fakeredis.FakeRedis(server=fakeredis.FakeServer(),
                                                  decode_responses=True)
        return lambda account: manager.use_cache("balance", function, account)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_pi_cache_file_cache_returns_a_dead_arguments_result(tmp_path):
    """pi_cache/base_cache.py:366-386 writes a class instance into the key as
    f"{class}#{id(obj)}" (ignore_self is False by default), and FileCache keeps the result and a
    serialised copy of the arguments, never the argument: a model born on a dead model's address
    gets the dead one's result."""
    pi_cache = PINS.need("pi-cache", "pi_cache")
    import pydantic

    class _Ledger(pydantic.BaseModel):    # pi-cache serialises a pydantic argument's fields
        balance: int

    scenarios = iter(("forced", "control"))

    def balance(reuse: bool) -> int:
        @pi_cache.file_cache(cache_dir=tmp_path / next(scenarios))
        def read(ledger: _Ledger) -> int:
            return ledger.balance

        first, result = _answers(read, lambda: _Ledger(balance=5), lambda: _Ledger(balance=70),
                                 lambda: object.__new__(_Ledger), reuse)
        assert first == 5
        return result

    assert balance(reuse=True) == 5     # released: the dead result
    assert balance(reuse=False) == 70   # control


def test_redis_cache_toolkit_returns_a_dead_arguments_result(monkeypatch):
    """redis_cache_toolkit/helpers.py:66-91 keys a call by hash() of its positional arguments,
    and cached (decorators.py:57-92) keeps only the pickled result in Redis: an argument with
    identity hash born on a dead argument's address gets the dead one's result."""
    decorators = PINS.need("redis-cache-toolkit", "redis_cache_toolkit.decorators")
    import fakeredis

    def memoize(function):
        database = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        monkeypatch.setattr(decorators, "get_redis_connection", lambda *args, **kwargs: database)
        return decorators.cached(timeout=3600)(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_redis_lru_returns_a_dead_arguments_result():
    """redis_lru/lru.py:125-132 keys a call by the hash() of each argument, and the decorator
    keeps only the result in Redis: an argument with identity hash born on a dead argument's
    address gets the dead one's result."""
    lru = PINS.need("redis-lru", "redis_lru")
    import fakeredis

    def memoize(function):
        return lru.RedisLRU(fakeredis.FakeStrictRedis(server=fakeredis.FakeServer()))(ttl=3600)(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def _account_class(decorate):
    """A class whose balance is read through ``reading``, decorated by ``decorate``; a new
    class (and so a new cache) for every scenario."""
    class Account:
        def __init__(self, balance: int):
            self.balance = balance

        @decorate
        def reading(self) -> int:
            return self.balance

    return Account


def test_symphra_cache_cached_property_gives_a_new_instance_a_dead_ones_value():
    """symphra_cache/decorators.py:320-344 keys a cached property by f"{owner}.{name}:{id(instance)}"
    in the cache manager and holds nothing of the instance: an instance born on a dead one's
    address reads the dead one's value."""
    symphra = PINS.need("symphra-cache", "symphra_cache")

    def account_class():
        return _account_class(symphra.CachedProperty(symphra.create_memory_cache(), ttl=3600))

    def reading(account) -> int:
        return account.reading

    assert _instance_answer(account_class(), reading, reuse=True) == 5    # released: the dead value
    assert _instance_answer(account_class(), reading, reuse=False) == 70  # control


def test_smart_cache_returns_a_dead_arguments_result(tmp_path, monkeypatch):
    """smart_cache/__init__.py:136-151 keys a call by hash() of its arguments and keeps only the
    result (also pickled to FUNCTION.pickle by a writer thread): an argument with identity hash
    born on a dead argument's address gets the dead one's result."""
    smart_cache = PINS.need("smart-cache", "smart_cache")
    scenarios = iter(("forced", "control"))

    def balance(reuse: bool) -> int:
        folder = tmp_path / next(scenarios)
        folder.mkdir()
        monkeypatch.chdir(folder)    # the writer thread writes into the working directory
        try:
            return _memoized_balance(smart_cache.smart_cache, reuse)
        finally:
            smart_cache.to_cache_queue.join()   # its last write lands in this folder

    assert balance(reuse=True) == 5     # released: the dead result
    assert balance(reuse=False) == 70   # control


def test_twat_cache_redis_engine_returns_a_dead_arguments_result(monkeypatch):
    """twat_cache/engines/redis.py:126-137 writes a call's key (qualname, args, kwargs) as
    str(hash(key)) and keeps only the pickled result in Redis: an argument with identity hash
    born on a dead argument's address gets the dead one's result."""
    engine = PINS.need("twat-cache", "twat_cache.engines.redis")
    from twat_cache.config import CacheConfig
    import fakeredis
    import redis

    def database(**options):
        return fakeredis.FakeRedis(server=fakeredis.FakeServer(),
                                   decode_responses=options.get("decode_responses", False))

    monkeypatch.setattr(redis, "Redis", database)    # each engine: a database of its own
    namespaces = itertools.count()

    def memoize(function):
        config = CacheConfig(folder_name=f"census-{next(namespaces)}")
        return engine.RedisCacheEngine(config).cache(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_remembers_gives_a_new_instance_a_dead_ones_result():
    """remembers/cache_key_builder.py:88-92 keys a remembered method's self by str(id(self)) in
    the in-memory default, and the LRU cache keeps only the result: an instance born on a dead
    one's address gets the dead one's result."""
    remembers = PINS.need("remembers", "remembers")

    def reading(account) -> int:
        return account.reading()

    assert _instance_answer(_account_class(remembers.remember()), reading, reuse=True) == 5    # released
    assert _instance_answer(_account_class(remembers.remember()), reading, reuse=False) == 70  # control


def test_cachingutils_returns_a_dead_arguments_result():
    """cachingutils/deco.py:16-57 keys a call by the tuple of hash() of its arguments, and its
    Cache keeps only the result: an argument with identity hash born on a dead argument's
    address gets the dead one's result."""
    cachingutils = PINS.need("cachingutils", "cachingutils")

    def memoize(function):
        return cachingutils.cached()(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_circuitpython_functools_cache_returns_a_dead_arguments_result():
    """circuitpython_functools.py:44-90 keys a call by hash() of the argument tuple, an int, and
    keeps only the result in the module's records: an argument with identity hash born on a
    dead argument's address gets the dead one's result."""
    functools_port = PINS.need("circuitpython-functools", "circuitpython_functools")

    assert _memoized_balance(functools_port.cache, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(functools_port.cache, reuse=False) == 70   # control


def test_cachemethod_returns_a_dead_arguments_result():
    """cachemethod.py:22-29 keys a cached method's call by the instance's seed plus hash() of its
    arguments, an int, and the method's LRU keeps only the result: an argument with identity
    hash born on a dead argument's address, passed to the same instance, gets the dead one's
    result."""
    cachemethod = PINS.need("cachemethod", "cachemethod")

    def memoize(function):
        class Bank:
            @cachemethod.lru_cachemethod(maxsize=128)
            def balance(self, account):
                return function(account)

        return Bank().balance

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control


def test_backlite_cached_returns_a_dead_arguments_result(tmp_path, monkeypatch):
    """backlite/decorators.py:115-116 keys a call by str(hash((args, kwargs))), and cached
    (:25-50) keeps only the pickled result in its SQLite Storage: an argument with identity hash
    born on a dead argument's address gets the dead one's result."""
    PINS.file("backlite", "decorators.py")    # skips, naming the release, when it is absent
    if sqlite3.sqlite_version_info < (3, 42, 0):
        import pytest
        engine = pytest.importorskip("pysqlite3", reason="backlite needs SQLite 3.42 or later")
        for name in [name for name in sys.modules if name.startswith("backlite")]:
            monkeypatch.delitem(sys.modules, name)    # imported anew over the newer engine
        monkeypatch.setitem(sys.modules, "sqlite3", engine)
    backlite = PINS.need("backlite", "backlite")
    scenarios = iter(("forced.db", "control.db"))

    def memoize(function):
        return backlite.cached(storage=backlite.Storage(tmp_path / next(scenarios)))(function)

    assert _memoized_balance(memoize, reuse=True) == 5     # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70   # control
