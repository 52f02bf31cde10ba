"""The hazards of part B of the eighth blind census (docs/log/2026-12-07-scan-blind-census-8-b.md), reproduced.

Five true hazards (four the census found, one found through the scan output), one test each:
forced onto the dead object's address, the released code answers for the dead object; with the
first object kept alive (the control) it answers right.
A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR sio-messenger==2026.2     # one directory per release, so the
    pip install --target DIR wired==0.4                # census ran them (sio-messenger brings
    pip install --target DIR raven==6.10.0             # extension-36, wired zope.interface,
    pip install --target DIR aiozk==0.32.0             # bubus its dependencies)
    pip install --target DIR bubus==1.5.6
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_8_b.py -q

Every new object is made by the test (a list, a dict, an exception with its traceback, a
request, an instance), so each test holds the first one in a one-item list and makes the next with ``land``
(through ``_next``, which makes it anywhere for the control); raven's key names two objects, the
exception and its traceback, so its test lands one after the other. Everything the library runs
is released code, unchanged; the stubs are named in each test (raven's network
send, aiozk's connection). sio-messenger's dependency extension-36 calls ``operator.is_none``
and ``operator.is_not_none``, which only Python 3.14 has; on an older Python the test supplies
those two functions, as 3.14 defines them, for the length of the test.
"""

from __future__ import annotations

import asyncio
import gc
import operator
import sys
import types

from cases.blind.pinned import Pins
from cases.blind.pinned import next_object as _next
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("sio-messenger==2026.2", "wired==0.4", "raven==6.10.0", "aiozk==0.32.0", "bubus==1.5.6")


def test_sio_messenger_runs_a_dead_sources_reactions_for_a_new_source(monkeypatch):
    """sio_messenger/type/message.py:14-33 keys a reaction by ``(content, id(source))`` in the
    messenger (type/messenger.py), without the source; its only cleanup is a
    ``weakref.finalize`` on the source, skipped (``except TypeError: pass``) for a source that
    cannot be weakly referenced. A list source dies with its reactions filed: a new list born
    on its address that sends the same message runs the dead source's reactions too."""
    monkeypatch.setattr(operator, "is_none", getattr(operator, "is_none", lambda x: x is None),
                        raising=False)
    monkeypatch.setattr(operator, "is_not_none",
                        getattr(operator, "is_not_none", lambda x: x is not None), raising=False)
    messenger = PINS.need("sio-messenger", "sio_messenger.type.messenger")

    def fired(reuse: bool) -> list:
        hub = messenger.messenger_t()
        calls: list = []
        box = [["first"]]                                   # a list: no weak reference
        hub.AddReaction(lambda: calls.append("first"), "changed", source=box[0])
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: ["second"], reuse)
            hub.AddReaction(lambda: calls.append("second"), "changed", source=later)
            hub.ReactToMessage("changed", source=later)
            del held, alive
        return calls

    assert fired(reuse=True) == ["first", "second"]     # released: the dead source's reaction ran
    assert fired(reuse=False) == ["second"]             # control


class _Greeter:
    def __init__(self, name: str):
        self.name = name


def _greeter(container) -> _Greeter:
    return _Greeter(container.context["user"])


def test_wired_hands_a_dead_contexts_service_to_a_new_context():
    """wired/container.py:85-107 caches service instances per context in
    ``ServiceCache._contexts[id(context)]``, without the context; the entry is dropped by a
    ``weakref.finalize`` on the context, skipped (``except TypeError``, "we simply cannot release
    the ctx_cache early") for a context that cannot be weakly referenced. A dict context dies
    with its cache: a new dict born on its address gets the dead context's service."""
    wired = PINS.need("wired", "wired")

    def greeted(reuse: bool) -> str:
        registry = wired.ServiceRegistry()
        registry.register_factory(_greeter, _Greeter, context=dict)
        container = registry.create_container()
        box = [{"user": "first"}]                           # a dict: no weak reference
        assert container.get(_Greeter, context=box[0]).name == "first"
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: {"user": "second"}, reuse)
            name = container.get(_Greeter, context=later).name
            del held, alive
        return name

    assert greeted(reuse=True) == "first"       # released: the dead context's service
    assert greeted(reuse=False) == "second"     # control


def _raised(n: int) -> BaseException:
    """An exception raised and caught here, its traceback attached; nothing else holds it."""
    try:
        raise ValueError(f"item {n} failed")
    except ValueError:
        return sys.exc_info()[1]


def test_raven_does_not_report_an_exception_born_on_a_reported_ones_address():
    """raven/base.py:347-370 and :633-642: ``Client.capture`` skips an exception whose key
    ``(type, id(exc), id(code), id(tb), tb_lasti)`` is in ``context.exceptions_to_skip`` and
    records each captured key there; only the framework integrations clear the set, at the end
    of a request (context.py:128-131). An exception raised at the same place after a reported
    one died, born with its traceback on their addresses, is silently not reported. The key names
    two objects, so each is landed in turn: the exception, then a traceback of the same frame
    and instruction (``types.TracebackType``, as the interpreter builds one on a raise)."""
    raven = PINS.need("raven", "raven")

    def reported(reuse: bool) -> list:
        client = raven.Client(dsn="http://public:secret@127.0.0.1:9/1", install_sys_hook=False,
                              install_logging_hook=False, enable_breadcrumbs=False)
        sent: list = []
        client.send = lambda **data: sent.append(data["event_id"])   # instead of the network
        first = _raised(1)
        client.captureException(exc_info=(ValueError, first, first.__traceback__))
        frame, lasti, lineno = (first.__traceback__.tb_frame, first.__traceback__.tb_lasti,
                                first.__traceback__.tb_lineno)
        exceptions, tracebacks = [first], [first.__traceback__]
        first.__traceback__ = None                          # each held by its own list only
        del first
        alive = (exceptions[0], tracebacks[0]) if not reuse else None
        with quiet_allocator():
            later, held = _next(exceptions, lambda: ValueError("item 2 failed"), reuse)
            trace, held_tb = _next(tracebacks,
                                   lambda: types.TracebackType(None, frame, lasti, lineno), reuse)
            client.captureException(exc_info=(ValueError, later, trace))
            del held, held_tb, alive
        return sent

    assert len(reported(reuse=True)) == 1    # released: the second exception was skipped
    assert len(reported(reuse=False)) == 2   # control


def test_aiozk_fails_a_request_born_on_a_timed_out_requests_address():
    """aiozk/retry.py:25-67 keeps each request's attempt times in ``RetryPolicy.timings[id(request)]``,
    without the request; session.py:206-234 clears the entry after a response and in its
    ``except`` arms, but a caller's timeout that cancels ``send`` while it waits for the
    connection (``ensure_safe_state``, outside the try) leaves it. A request born on that
    request's address starts with its attempts: under ``n_times(2)`` its first try is counted as
    the second and fails with ``FailedRetry``, and it is never sent.
    The connection is stubbed: ``ensure_safe_state`` blocks while "disconnected", and a stub
    ``conn.send`` answers once "connected"."""
    aiozk = PINS.need("aiozk", "aiozk")
    from aiozk.protocol.exists import ExistsRequest
    from aiozk.session import Session

    class _Conn:
        async def send(self, request, xid):
            return 1, "ok"

    async def answer(reuse: bool) -> str:
        session = Session("127.0.0.1:2181", 10, aiozk.RetryPolicy.n_times(2), False, 1)
        session.conn = _Conn()
        session.set_heartbeat = lambda: None
        outage = asyncio.Event()

        async def disconnected(writing=False):
            await outage.wait()

        async def connected(writing=False):
            return None

        session.ensure_safe_state = disconnected
        box = [ExistsRequest(path="/first", watch=False)]
        try:
            await asyncio.wait_for(session.send(box[0]), 0.01)    # the caller's timeout
        except asyncio.TimeoutError:
            pass
        gc.collect()                       # the cancelled task's frames let go of the request
        session.ensure_safe_state = connected
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: ExistsRequest(path="/second", watch=False), reuse)
        try:
            result = await session.send(later)
        except aiozk.exc.FailedRetry:
            result = "FailedRetry"
        del held, alive
        return result

    assert asyncio.run(answer(reuse=True)) == "FailedRetry"   # released: failed, never sent
    assert asyncio.run(answer(reuse=False)) == "ok"           # control


def test_bubus_hands_a_dead_instances_loop_bound_semaphore_to_a_new_instance():
    """bubus/helpers.py:124-197 and :482-485: ``@retry(semaphore_limit=..., semaphore_scope='self')``
    keeps one asyncio.Semaphore per instance in the module-level ``GLOBAL_RETRY_SEMAPHORES`` under
    ``f'{id(self)}.{name}'``, never removed. A semaphore that once made a call wait is bound to
    that call's event loop; an instance born on a dead instance's address, used under a new loop
    (a later ``asyncio.run``), gets the dead one's semaphore, and its first call that waits fails
    with ``RuntimeError`` (bound to a different event loop). Found through the scan output."""
    helpers = PINS.need("bubus", "bubus.helpers")

    def second_round(reuse: bool) -> str:
        class Worker:        # a semaphore name of its own per round: no earlier entry can match
            @helpers.retry(retries=0, timeout=5, semaphore_limit=1, semaphore_scope="self",
                           semaphore_name=f"work-{reuse}")
            async def work(self):
                await asyncio.sleep(0)              # yields, so the second call waits
                return 1

        async def twice(worker) -> list:
            return await asyncio.gather(worker.work(), worker.work())

        box = [Worker()]
        assert asyncio.run(twice(box[0])) == [1, 1]   # binds the instance's semaphore to this loop
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, Worker, reuse)
        try:
            result = str(asyncio.run(twice(later)))
        except RuntimeError as error:
            result = "RuntimeError" if "different event loop" in str(error) else repr(error)
        del held, alive
        return result

    assert second_round(reuse=True) == "RuntimeError"   # released: the dead instance's semaphore
    assert second_round(reuse=False) == "[1, 1]"        # control
