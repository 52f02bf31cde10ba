"""The hazards of part B of the twelfth blind census (docs/log/2026-12-07-scan-blind-census-12-b.md), reproduced.

One test per true hazard the census found: forced onto the dead object's address, the released
code answers for the dead object; with the first object kept alive (the control) it answers
right. A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR fastx-middleware==1.7.0
    pip install --target DIR --no-deps kairondb==1.1.0
    pip install --target DIR resilient-circuit==0.8.6
    pip install --target DIR maxhttp==0.1.9
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_12_b.py -q

Every object keyed by id here is one the test makes. Each test places the next object with
``land`` (through ``next_object``), making the object alone so that nothing else of its size
class is allocated while it is placed: fastx-middleware's app is a bare ``Starlette`` the test
then initialises (its victim born in pools seeded with ``seed_pools``), kairondb's records and
maxhttp's headers are dicts (maxhttp's request is stopped, before any connection, by an auth
handler that records the headers the client built). resilient-circuit's breaker lives in a reference cycle with its status object, so its
test frees it with a collection and then walks ``land_on`` down to its block (the breaker made
bare, then initialised). fastx-middleware 1.7.0 imports ``core.utils.request_id_context``, a module of the host
(FastMVC) project that the release does not ship; the test gives it a stand-in with the
``RequestIdContext`` the release uses (``set``/``reset``), which the code under test never calls.
Everything the libraries run is released code, unchanged.
"""

from __future__ import annotations

import contextvars
import gc
import json
import pickle
import sys
import types

from cases.blind.pinned import Pins, only_holder
from cases.blind.pinned import next_object as _next
from harness.idreuse.landing import seed_pools
from harness.idreuse.morgue import land_on, probe_slots, quiet_allocator

PINS = Pins("fastx-middleware==1.7.0", "kairondb==1.1.0", "resilient-circuit==0.8.6", "maxhttp==0.1.9")


def _host_request_id_module(monkeypatch):
    """The host project's ``core.utils.request_id_context`` that fastx-middleware imports."""
    request_id = contextvars.ContextVar("census12b_request_id", default=None)

    class RequestIdContext:
        set = staticmethod(request_id.set)
        reset = staticmethod(request_id.reset)
        get = staticmethod(request_id.get)

    modules = {name: types.ModuleType(name) for name in ("core", "core.utils", "core.utils.request_id_context")}
    modules["core.utils.request_id_context"].RequestIdContext = RequestIdContext
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def test_fastx_add_middleware_once_skips_an_app_on_a_dead_apps_address(monkeypatch):
    """fastx_middleware/mw_core/factory.py:29-63, :385-417: the module registry
    ``_middleware_registry[id(root app)]`` keeps the names of the middleware added to each app,
    never pruned and holding nothing of the app; ``add_middleware_once`` skips a middleware
    registered for that id. An app made by a factory and born on a dead app's address is not
    given its middleware: ``add_middleware_once`` returns False and the app has none."""
    _host_request_id_module(monkeypatch)
    factory = PINS.need("fastx-middleware", "fastx_middleware.mw_core.factory")
    from starlette.applications import Starlette
    from starlette.middleware.cors import CORSMiddleware

    kept = []

    def next_app(reuse: bool):
        shells = seed_pools(lambda: object.__new__(Starlette))
        box = [Starlette()]
        assert factory.add_middleware_once(box[0], CORSMiddleware, allow_origins=["https://a.example"])
        alive = box[0] if not reuse else None
        if reuse:
            only_holder(box, "the first app")
        with quiet_allocator():     # the app object alone; its __init__ runs after it is placed
            app, held = _next(box, lambda: object.__new__(Starlette), reuse)
        del held, shells
        app.__init__()
        kept.extend([alive, app])
        added = factory.add_middleware_once(app, CORSMiddleware, allow_origins=["https://b.example"])
        return added, [middleware.cls for middleware in app.user_middleware]

    assert next_app(reuse=True) == (False, [])                 # released: the new app has no CORS
    assert next_app(reuse=False) == (True, [CORSMiddleware])   # control


def _next_record(box: list, reuse: bool) -> dict:
    with quiet_allocator():
        record, held = _next(box, lambda: {}, reuse)     # a display: the dict free list, as the dead record went to
    del held
    return record


def test_kairondb_json_serialisation_answers_with_a_dead_records_json():
    """kairondb/optimizations.py:125-157, :289-294: ``OptimizedSerializer._json_cache[id(obj)]``
    keeps the JSON of each object serialised through ``PerformanceOptimizer.optimize_json_serialization``,
    never pruned (size-capped only) and holding nothing of the object. A record born on a dead
    record's address is serialised as the dead record."""
    kairondb = PINS.need("kairondb", "kairondb")
    kept = []

    def next_json(reuse: bool):
        optimizer = kairondb.PerformanceOptimizer(kairondb.OptimizationConfig())
        box = [{"user": 1, "name": "first"}]
        assert json.loads(optimizer.optimize_json_serialization(box[0])) == {"user": 1, "name": "first"}
        alive = box[0] if not reuse else None
        if reuse:
            only_holder(box, "the first record")
        record = _next_record(box, reuse)
        record.update(user=2, name="second")
        kept.extend([alive, record])
        return json.loads(optimizer.optimize_json_serialization(record))

    assert next_json(reuse=True) == {"user": 1, "name": "first"}     # released: the dead record's JSON
    assert next_json(reuse=False) == {"user": 2, "name": "second"}   # control


def test_kairondb_pickle_serialisation_answers_with_a_dead_records_bytes():
    """kairondb/optimizations.py:180-193: ``OptimizedSerializer._pickle_cache[id(obj)]`` keeps the
    pickle of each object ``serialize_pickle`` was given, never pruned (size-capped only) and
    holding nothing of the object. A record born on a dead record's address is pickled as the
    dead record."""
    kairondb = PINS.need("kairondb", "kairondb")
    kept = []

    def next_pickle(reuse: bool):
        serializer = kairondb.OptimizedSerializer(kairondb.OptimizationConfig())
        box = [{"order": 1}]
        assert pickle.loads(serializer.serialize_pickle(box[0])) == {"order": 1}
        alive = box[0] if not reuse else None
        if reuse:
            only_holder(box, "the first record")
        record = _next_record(box, reuse)
        record["order"] = 2
        kept.extend([alive, record])
        return pickle.loads(serializer.serialize_pickle(record))

    assert next_pickle(reuse=True) == {"order": 1}     # released: the dead record's bytes
    assert next_pickle(reuse=False) == {"order": 2}    # control


def test_resilient_circuit_anonymous_breaker_on_a_dead_ones_address_starts_open():
    """resilient_circuit/circuit_breaker.py:112, :128-129, :225-236: a breaker made without a
    ``resource_key`` is keyed ``f"anonymous_{id(self)}"`` in its storage and loads that key's
    state when made. Over a shared storage (the PostgreSQL table its factory picks when
    configured, or one storage passed to several breakers) a new anonymous breaker born on a
    dead one's address starts with the dead breaker's OPEN state and rejects its first call."""
    PINS.need("resilient-circuit", "resilient_circuit")
    from datetime import timedelta

    from resilient_circuit import CircuitProtectorPolicy
    from resilient_circuit.exceptions import ProtectedCallError
    from resilient_circuit.storage.memory import InMemoryStorage

    def down():
        raise ConnectionError("dependency down")

    kept = []

    def first_call_of_next_breaker(reuse: bool) -> str:
        storage = InMemoryStorage()
        options = {"storage": storage, "cooldown": timedelta(seconds=600)}
        gc.collect()
        shells = seed_pools(lambda: object.__new__(CircuitProtectorPolicy))
        first = CircuitProtectorPolicy(**options)
        try:
            first(down)()
        except ConnectionError:
            pass
        address = id(first)
        if reuse:
            del first                   # its status object holds it: freed by the collection below
            with quiet_allocator():
                held = probe_slots()
                gc.collect()
                later = land_on(address, lambda: object.__new__(CircuitProtectorPolicy), held)
            assert later is not None, "no breaker landed on the dead one's address"
            del held
        else:
            kept.append(first)
            later = object.__new__(CircuitProtectorPolicy)
        del shells
        later.__init__(**options)
        kept.append(later)
        try:
            return later(lambda: "called")()
        except ProtectedCallError:
            return "rejected"

    assert first_call_of_next_breaker(reuse=True) == "rejected"    # released: the dead breaker's OPEN
    assert first_call_of_next_breaker(reuse=False) == "called"     # control


def test_maxhttp_request_on_a_dead_headers_dicts_address_is_sent_without_user_agent():
    """maxhttp/client.py:77, :171-175, :554-559: ``Client._has_header`` keeps the lower-cased
    keys of each request's headers dict in ``_header_cache[id(headers)]``, never pruned and
    holding nothing of the dict. A request whose headers dict is born on the address of a dead
    one that carried its own User-Agent is taken to carry one too: the client does not add its
    User-Agent (nor, through ``_inject_cookies``, the jar's cookies when the dead dict had a
    Cookie header)."""
    maxhttp = PINS.need("maxhttp", "maxhttp")
    import asyncio

    class Stop(Exception):
        pass

    class Capture(maxhttp.AuthBase):      # the client's auth hook sees the request before it connects
        def __init__(self):
            self.headers = []

        async def on_request(self, request):
            self.headers.append(dict(request.headers))
            raise Stop

    async def send(client, headers, capture):
        try:
            await client.get("http://127.0.0.1:9/", headers=headers, auth=capture)
        except Stop:
            pass

    kept = []

    async def next_request_headers(reuse: bool) -> dict:
        client, capture = maxhttp.Client(), Capture()
        box = [{"User-Agent": "custom/1"}]
        await send(client, box[0], capture)
        assert capture.headers[0]["User-Agent"] == "custom/1"
        alive = box[0] if not reuse else None
        if reuse:
            only_holder(box, "the first headers")
        headers = _next_record(box, reuse)
        headers["X-Trace"] = "2"
        kept.extend([alive, headers])
        await send(client, headers, capture)
        await client.close()
        return capture.headers[1], client.user_agent

    headers, user_agent = asyncio.run(next_request_headers(reuse=True))
    assert "User-Agent" not in headers                   # released: the dead dict's header set
    headers, user_agent = asyncio.run(next_request_headers(reuse=False))
    assert headers["User-Agent"] == user_agent           # control
