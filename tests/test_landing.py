"""The forced-reuse helpers for third-party code (harness.idreuse.landing)."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.idreuse.landing import Landing, LandingMissed, born_on_death_of, land, seed_pools
from harness.idreuse.morgue import quiet_allocator


class Widget:
    def __init__(self, name):
        self.name = name


class Maker:
    """Makes a Widget after a temporary of Widget's size class, as library code does."""

    def make(self, name):
        scratch = object.__new__(Widget)   # takes the freed block first, then is dropped
        del scratch
        spare = object.__new__(Widget)     # and this one keeps a block
        widget = Widget(name)
        self.spares.append(spare)
        return widget

    def __init__(self):
        self.spares = []


def test_born_on_death_of_places_the_instance_a_library_makes():
    maker = Maker()
    for _ in range(20):
        with quiet_allocator():
            kept = seed_pools(lambda: object.__new__(Widget))
            box = [Widget("old")]
            address = id(box[0])
            with born_on_death_of(Widget, box) as landing:
                new = maker.make("new")
            assert box == []
            assert landing.born is new and id(new) == address and new.name == "new"
        del kept, new
    # The class still makes instances with arguments afterwards.
    assert Widget("after").name == "after"


def test_land_places_an_object_the_caller_makes():
    for _ in range(20):
        with quiet_allocator():
            kept = seed_pools(lambda: object.__new__(Widget))
            box = [Widget("old")]
            address = id(box[0])
            landing, held = land(box, lambda: Widget("new"))
            assert landing.require() is landing.born and id(landing.born) == address
        del kept, held


def test_a_landing_that_missed_says_so():
    missed = Landing(0x1000, "Widget", None, 7)
    with pytest.raises(LandingMissed, match="no new object landed on the dead Widget's address 0x1000 in 7 tries"):
        missed.require()


def test_a_live_object_is_never_landed_on():
    alive = Widget("alive")
    box = [alive]
    landing, held = land(box, lambda: Widget("new"), limit=500)
    assert landing.born is None and landing.tries == 500
    del held


def test_a_class_with_its_own_new_is_refused():
    class Custom:
        def __new__(cls):
            return super().__new__(cls)

    with pytest.raises(HarnessError, match="has its own __new__"):
        with born_on_death_of(Custom, [Custom()]):
            pass


def test_seed_pools_keeps_every_other_shell():
    kept = seed_pools(lambda: object.__new__(Widget), count=10)
    assert len(kept) == 10 and all(type(k) is Widget for k in kept)
