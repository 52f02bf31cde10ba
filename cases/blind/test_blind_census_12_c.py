"""The hazards of part C of the twelfth blind census (docs/log/2026-12-07-scan-blind-census-12-c.md), reproduced.

One test per true hazard the census found: forced onto the dead object's address, the released
code answers for the dead object; with the first object kept alive (the control) it answers
right. A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR khemia==0.1.1 handless==0.3.0 wd-di==0.2.14
    PYTHONPATH=DIR:$PWD .venv/bin/python -m pytest -p no:xdist cases/blind/test_blind_census_12_c.py -q

khemia's argument and wd-di's context object are made by the test (as a caller makes the
objects it passes), so those tests hold the first one in a one-item list and make the next with
``land`` (through ``_next``, which makes it anywhere for the control); wd-di's pipeline keeps
each context in a reference cycle until a collection, so that test collects before the landing. handless makes its ``Registration`` inside
``register_local(...).value(...)`` and ``override(...).value(...)``, after the builder and the
value's closure, so those tests place the next one with ``born_on_death_of``. Everything the
libraries run is released code, unchanged.
"""

from __future__ import annotations

import gc

from cases.blind.pinned import Pins, only_holder
from cases.blind.pinned import next_object as _next
from harness.idreuse.landing import born_on_death_of
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("khemia==0.1.1", "handless==0.3.0", "wd-di==0.2.14")


class _Order:
    """A caller's plain object: no ``__eq__``/``__hash__``, so ``hash()`` is its identity."""

    def __init__(self, number: int, amount: float):
        self.number = number
        self.amount = amount


def test_khemia_gives_an_argument_born_on_a_dead_ones_address_its_result():
    """khemia/cache.py:358-367, :370-423: every cache decorator (``cache``, ``lru_cache``,
    ``fifo_cache``, ``lfu_cache``, ``mru_cache``, ``ttl_cache``, ``tlru_cache``) keys results by
    ``str(gen_signature(args, kwargs))``, that is ``str(hash(tuple(args)))``, a string that holds
    nothing of the arguments. An argument hashed by identity born on a dead argument's address
    is given the dead argument's result."""
    khemia_cache = PINS.need("khemia", "khemia.cache")

    @khemia_cache.lru_cache()
    def total_with_tax(order: _Order) -> tuple:
        return order.number, round(order.amount * 1.2, 2)

    kept = []   # every order passed stays alive, so the control can't be born on one

    def answer(reuse: bool, first: int, second: int) -> int:
        box = [_Order(first, 10.0 * first)]
        assert total_with_tax(box[0]) == (first, round(12.0 * first, 2))
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: _Order(second, 10.0 * second), reuse)
        del held
        kept.extend([later, alive])
        return total_with_tax(later)[0]

    assert answer(reuse=True, first=1, second=2) == 1    # released: the dead order's result
    assert answer(reuse=False, first=3, second=4) == 4   # control


class _Request:
    def __init__(self, number: int):
        self.number = number


def _only_reference(box: list) -> None:
    gc.collect()
    only_holder(box, "the dead registration")


def test_handless_resolves_a_dead_contexts_local_value_for_a_registration_born_on_its_address():
    """handless/lifetimes.py:115-236: the container's singleton cache
    ``LifetimeContext._cache[id(registration)]`` holds the instance, not the registration, and
    lives for the container (cleared only by ``release()``); ``value()`` registrations are
    Singleton (_registry.py:136). A value registered with ``register_local`` in one resolution
    context (one per request, as the container's docstring advises) dies with its context; the
    next context's registration born on its address resolves to the dead context's value."""
    handless = PINS.need("handless", "handless")
    from handless._registry import Registration

    container = handless.Container()
    kept = []   # every context, registration and value stays alive in the control

    def resolved(reuse: bool, first: int, second: int) -> int:
        ctx = container.open_context()
        ctx.register_local(_Request).value(_Request(first))
        assert ctx.resolve(_Request).number == first
        box = [ctx._registry.get_registration(_Request)]
        if reuse:
            ctx.release()
            del ctx                                  # the context and its registry, gone
            _only_reference(box)
            later_ctx = container.open_context()
            with quiet_allocator(), born_on_death_of(Registration, box) as landing:
                later_ctx.register_local(_Request).value(_Request(second))
            landing.require()
        else:
            kept.extend([ctx, box[0]])
            later_ctx = container.open_context()
            later_ctx.register_local(_Request).value(_Request(second))
        kept.append(later_ctx)
        return later_ctx.resolve(_Request).number

    try:
        assert resolved(reuse=True, first=1, second=2) == 1    # released: the dead context's request
        assert resolved(reuse=False, first=3, second=4) == 4   # control
    finally:
        container.release()


def test_handless_resolves_a_dead_overrides_value_for_an_override_born_on_its_address():
    """handless/_container.py:72-73, :92-94 and lifetimes.py:192-212: ``container.override(T)``
    replaces the previous override's registration (the registry allows overriding), which then
    dies, while the container's singleton cache keeps the instance under the dead
    registration's id (the NOTE at lifetimes.py:196-198 meant the id to tell overrides apart).
    An override born on a dead override's address resolves to the dead override's value."""
    handless = PINS.need("handless", "handless")
    from handless._registry import Registration

    kept = []

    def resolved(reuse: bool, first: int, second: int) -> int:
        container = handless.Container()
        container.register(_Request).value(_Request(0))
        try:
            container.override(_Request).value(_Request(first))
            with container.open_context() as ctx:
                assert ctx.resolve(_Request).number == first
            box = [container.lookup(_Request)]
            if reuse:
                container.override(_Request).value(_Request(-1))   # replaces it: the box holds it now
                _only_reference(box)
                with quiet_allocator(), born_on_death_of(Registration, box) as landing:
                    container.override(_Request).value(_Request(second))
                landing.require()
            else:
                kept.append(box[0])
                container.override(_Request).value(_Request(-1))
                container.override(_Request).value(_Request(second))
            with container.open_context() as ctx:
                return ctx.resolve(_Request).number
        finally:
            container.release()

    assert resolved(reuse=True, first=1, second=2) == 1    # released: the dead override's value
    assert resolved(reuse=False, first=3, second=4) == 4   # control


class _User:
    """A caller's plain object: its repr is the default ``<... object at 0x...>``."""

    def __init__(self, name: str):
        self.name = name


class _RequestContext:
    def __init__(self, user: _User, action: str):
        self.user = user
        self.action = action


def test_wd_di_caching_middleware_answers_a_context_with_a_dead_contexts_result():
    """wd/di/middleware.py:219-244: the built-in ``CachingMiddleware`` keys each pipeline
    result by ``hash(str(context.__dict__))``, a number that holds nothing of the context, never
    pruned; a context field with the default repr puts its address into the key. A context
    whose user is born on a dead context's user's address is answered with the dead context's
    result."""
    middleware = PINS.need("wd-di", "wd.di.middleware")
    import asyncio

    pipeline = middleware.MiddlewarePipeline()
    pipeline.use(middleware.CachingMiddleware().invoke)

    async def handler(context, call_next):
        return f"{context.action} for {context.user.name}"

    pipeline.use(handler)
    kept = []   # every user shown stays alive, so the control can't be born on one

    def answer(reuse: bool, first: str, second: str) -> str:
        box = [_User(first)]
        assert asyncio.run(pipeline.execute(_RequestContext(box[0], "dashboard"))) == f"dashboard for {first}"
        gc.collect()    # the pipeline's invoke_next closure is a cycle that held the context
        alive = box[0] if not reuse else None
        if reuse:
            only_holder(box, "the first user")
        with quiet_allocator():
            later, held = _next(box, lambda: _User(second), reuse)
        del held
        kept.extend([later, alive])
        return asyncio.run(pipeline.execute(_RequestContext(later, "dashboard")))

    assert answer(reuse=True, first="ada", second="bob") == "dashboard for ada"    # released: the dead context's result
    assert answer(reuse=False, first="cy", second="dee") == "dashboard for dee"    # control
