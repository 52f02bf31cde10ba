"""The hazards of part B of the ninth blind census (docs/log/2026-12-07-scan-blind-census-9-b.md), reproduced.

One test per true hazard the census found: forced onto the dead object's address, the released
code answers for the dead object; with the first object kept alive (the control) it answers
right. A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR rfs-framework==4.6.6 --no-deps   # its cache imports need only pydantic
    pip install --target DIR pyweb-stack==0.6.2
    pip install --target DIR finops-mcp==0.12.0 --no-deps   # its AWS connector imports no dependency
    pip install --target DIR goldenmatch==3.22.0
    pip install --target DIR aioresilience==0.2.1
    pip install --target DIR self-sentry==0.5.0 --no-deps   # slack-sdk is imported only to send
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_9_b.py -q

Every new object is made by the test (an instance, a connector, a list, a bound method), so
each test holds the first one in a one-item list and makes the next with ``land`` (through
``_next``, which makes it anywhere for the control); a database's connect() and self-sentry's
event loop make other objects beside the one placed, so those two tests place it with
``born_on_death_of``. Everything the library runs is released code, unchanged; the stubs
are named in each test (finops-mcp's AWS session and Cost Explorer client).
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import itertools

from cases.blind.pinned import Pins
from cases.blind.pinned import next_object as _next
from harness.idreuse.landing import born_on_death_of
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("rfs-framework==4.6.6", "pyweb-stack==0.6.2", "finops-mcp==0.12.0", "goldenmatch==3.22.0",
            "aioresilience==0.2.1", "self-sentry==0.5.0")

_CACHE_NAMES = itertools.count()


def test_rfs_cached_method_returns_a_dead_instances_result():
    """rfs/cache/decorators.py:283-312 ``cached_method`` keys a call by ``method_{id(self)}``
    and the arguments (no ``key_attr`` given) in the registered cache backend, for the TTL, and
    holds nothing of the instance: an instance born on a dead one's address that calls the
    same method with the same arguments gets the dead instance's result."""
    decorators = PINS.need("rfs-framework", "rfs.cache.decorators")
    from rfs.cache.base import CacheType, create_cache
    from rfs.cache.memory_cache import MemoryCacheConfig

    def answer(reuse: bool) -> str:
        name = f"census-{next(_CACHE_NAMES)}"   # a cache of its own per scenario

        class Account:
            def __init__(self, balance: int):
                self.balance = balance

            @decorators.cached_method(ttl=300, cache_name=name)
            async def report(self, unit: str) -> str:
                return f"{self.balance} {unit}"

        async def run() -> str:
            made = await create_cache(MemoryCacheConfig(cache_type=CacheType.MEMORY), name)
            assert made.is_success()
            box = [Account(5)]
            assert await box[0].report("EUR") == "5 EUR"
            alive = box[0] if not reuse else None
            with quiet_allocator():
                later, held = _next(box, lambda: Account(70), reuse)
            result = await later.report("EUR")
            del held, alive
            return result

        return asyncio.run(run())

    assert answer(reuse=True) == "5 EUR"     # released: the dead instance's result
    assert answer(reuse=False) == "70 EUR"   # control


def test_pyweb_skips_creating_tables_in_a_database_born_on_a_dead_ones_address():
    """pyweb/push.py:76-83 (and webhooks.py:111-118, filegc.py:36-42) record "tables created"
    for a database as ``id(db)`` in a module-level set, never pruned: a database born on a
    dead database's address is taken as ready and never gets the tables."""
    db = PINS.need("pyweb-stack", "pyweb.db")
    from pyweb import push

    def tables(database) -> set:
        rows = database.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        return {row[0] for row in rows}

    kept = []   # every database marked ready stays alive, so the control can't be born on one

    def created(reuse: bool) -> bool:
        box = [db.connect("sqlite://")]          # an in-memory database of its own
        push.ensure_tables(box[0])
        assert "pyweb_push_subscriptions" in tables(box[0])
        box[0].close()
        alive = box[0] if not reuse else None
        if reuse:
            # connect() makes its pool's objects beside the database, and one of them could take
            # the dead database's block between tries: the database itself is placed instead
            with quiet_allocator(), born_on_death_of(db.SQLiteDB, box) as landing:
                later = db.connect("sqlite://")
            landing.require()
        else:
            later = db.connect("sqlite://")
        push.ensure_tables(later)
        del alive
        kept.append(later)
        return "pyweb_push_subscriptions" in tables(later)

    assert created(reuse=True) is False    # released: the new database never gets its table
    assert created(reuse=False) is True    # control


class _DefaultProfileSession:
    """What ``boto3.Session(aws_access_key_id=...)`` is to the connector: a session whose
    profile is "default" (finops/accounts.py:168-181 builds one for every role_arn account)."""
    profile_name = "default"


class _CostExplorer:
    """A Cost Explorer client stub that answers one account's spend."""

    def __init__(self, usd: float):
        self.usd = usd

    def get_cost_and_usage(self, **query):
        group = {"Keys": ["EC2"], "Metrics": {"UnblendedCost": {"Amount": str(self.usd), "Unit": "USD"}}}
        return {"ResultsByTime": [{"TimePeriod": query["TimePeriod"], "Groups": [group], "Total": {}}]}


def test_finops_serves_a_dead_connectors_cached_costs_to_a_new_account(monkeypatch):
    """finops/connectors/aws.py:91-118 names a connector given a default-profile session
    ``unshared:{id(self)}``, and get_costs (:295-310) caches the account's CostSummary in
    finops.cache under that name for 12 hours; tools/cost_queries.py:79/241 make a connector per
    call for a named account. A connector for another account born on a dead one's address gets
    the dead account's costs. Stubs: the session, and ``_client_and_account`` (STS and the Cost
    Explorer client) on each connector, answering that account's own spend; the disk cache off."""
    monkeypatch.setenv("FINOPS_CACHE_DISK_DISABLED", "1")
    aws = PINS.need("finops-mcp", "finops.connectors.aws")
    from finops import cache

    monkeypatch.setattr(cache, "_DISK_DISABLED", True)

    session = _DefaultProfileSession()   # made first: making it in ``land``'s calls would take the block

    def connector(usd: float, account: str):
        made = aws.AWSConnector(session=session)
        made._client_and_account = lambda role_arn: (_CostExplorer(usd), account)
        return made

    def spend(reuse: bool) -> float:
        cache.clear()
        month = (datetime.date(2026, 11, 1), datetime.date(2026, 12, 1))

        async def run() -> float:
            box = [connector(100.0, "111111111111")]
            assert (await box[0].get_costs(*month)).total_usd == 100.0
            alive = box[0] if not reuse else None
            with quiet_allocator():
                later, held = _next(box, lambda: connector(250.0, "222222222222"), reuse)
            result = (await later.get_costs(*month)).total_usd
            del held, alive
            return result

        return asyncio.run(run())

    assert spend(reuse=True) == 100.0    # released: the first account's costs
    assert spend(reuse=False) == 250.0   # control


def test_goldenmatch_scores_a_block_with_a_dead_blocks_embeddings():
    """goldenmatch/core/scorer.py:1255-1272 asks the process-wide embedder
    (core/embedder.py:166-198) for ``embed_column(values, cache_key=f"_block_{id(values)}")``,
    and embed_column returns whatever its cache holds under that key, never pruned: a block's
    value list born on a dead block's list address is scored with the dead block's embeddings.
    The embedder is the zero-config in-house model ("inhouse"), no stub."""
    scorer = PINS.need("goldenmatch", "goldenmatch.core.scorer")
    from goldenmatch.core.embedder import get_embedder
    import numpy as np

    embedder = get_embedder("inhouse")
    first_block = ["ann lee 12 elm st", "anne lee 12 elm street", "bob stone 4 oak rd"]
    second_block = ["carl diaz 9 pine ave", "karl dias 9 pine avenue", "dora wu 1 main st"]

    def uncached(values) -> np.ndarray:
        return embedder.cosine_similarity_matrix(embedder.embed(values))

    kept = []   # every list scored stays alive, so the control can't be born on one

    def scored(reuse: bool) -> np.ndarray:
        box = [[first_block[0], first_block[1], first_block[2]]]   # displays: lists from the free list
        scorer._fuzzy_score_matrix(box[0], "embedding", model_name="inhouse")
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: [second_block[0], second_block[1], second_block[2]], reuse)
            result = scorer._fuzzy_score_matrix(later, "embedding", model_name="inhouse")
            del held, alive
        kept.append(later)
        return result

    assert np.allclose(scored(reuse=True), uncached(first_block))     # released: the dead block's scores
    assert np.allclose(scored(reuse=False), uncached(second_block))   # control


class _Client:
    async def fetch(self, item: int):
        return ("fetched", item)

    def parse(self, item: int):
        return ("parsed", item)


def test_aioresilience_awaits_a_sync_callable_born_on_a_coroutine_functions_address():
    """aioresilience/circuit_breaker.py:315-322 caches ``asyncio.iscoroutinefunction(func)`` per
    breaker in ``_coro_cache[id(func)]``, never pruned; ``call`` gets callables made per call
    (bound methods). A sync bound method born on a dead async one's address is taken for a
    coroutine function and awaited: TypeError instead of its result."""
    breakers = PINS.need("aioresilience", "aioresilience.circuit_breaker")
    client = _Client()

    def answer(reuse: bool):
        async def run():
            breaker = breakers.CircuitBreaker("census")
            box = [client.fetch]                       # a bound method, made here
            assert await breaker.call(box[0], 1) == ("fetched", 1)
            alive = box[0] if not reuse else None
            with quiet_allocator():
                later, held = _next(box, lambda: client.parse, reuse)
            try:
                return await breaker.call(later, 2)
            except TypeError as error:
                return type(error)
            finally:
                del held, alive

        return asyncio.run(run())

    assert answer(reuse=True) is TypeError           # released: the sync method was awaited
    assert answer(reuse=False) == ("parsed", 2)      # control


def test_self_sentry_never_hooks_a_loop_born_on_a_dead_loops_address(monkeypatch):
    """self_sentry/_hooks.py:57-101 installs its asyncio exception handler once per
    ``id(loop)``, remembered in a module-level set never pruned: a new event loop born on a
    dead loop's address is never hooked, so its asyncio exceptions go unreported. init() is
    given a token it never uses (nothing is sent) and leaves sys/threading hooks alone; the
    new loop is made by asyncio, so ``born_on_death_of`` places it."""
    self_sentry = PINS.need("self-sentry", "self_sentry")
    from self_sentry import _config, _hooks

    # born_on_death_of steers the block with bare loops (no __init__); asyncio's unclosed-loop
    # warning in BaseEventLoop.__del__ fails on those and its report allocates: silenced here.
    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "__del__", lambda loop: None)
    monkeypatch.setattr(_config, "_config", None)
    monkeypatch.setattr(_hooks, "_asyncio_installed_loops", set())
    self_sentry.init("unused-token", channel="census", service_name="census",
                     install_excepthook=False, install_threading_hook=False)

    @self_sentry.report_errors()
    def work() -> None:                 # a decorated call made inside the running loop
        return None

    async def hooked() -> bool:
        work()
        return asyncio.get_running_loop().get_exception_handler() is not None

    kept = []   # every loop stays alive, so the control can't be born on a hooked loop's address

    def second_loop_hooked(reuse: bool) -> bool:
        box = [asyncio.new_event_loop()]
        assert box[0].run_until_complete(hooked())
        box[0].close()
        alive = box[0] if not reuse else None
        gc.collect()   # the finished task sits in a cycle that holds the loop; only the box may
        if reuse:
            with quiet_allocator(), born_on_death_of(type(box[0]), box) as landing:
                later = asyncio.new_event_loop()
            assert landing.require() is later
        else:
            later = asyncio.new_event_loop()
        try:
            return later.run_until_complete(hooked())
        finally:
            later.close()
            kept.extend([later, alive])

    assert second_loop_hooked(reuse=True) is False   # released: the new loop was never hooked
    assert second_loop_hooked(reuse=False) is True   # control
