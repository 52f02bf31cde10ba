"""Shells: a released module object's block is kept, and the next instance of its class is born there.

Known bad: an object something else still holds gets no shell (it is a survivor, not dead); a
class with a ``__new__`` of its own, a tensor or a builtin is not placeable; a rank that does not
force reuse places nothing.
"""

from __future__ import annotations

import gc

import pytest

from harness.idreuse.morgue import MORGUE, ReusePolicy
from harness.idreuse.shells import SHELLS, placeable, placing


@pytest.fixture(autouse=True)
def clean_state():
    MORGUE.clear()
    SHELLS.clear()
    yield
    MORGUE.configure(ReusePolicy.parse("natural"), 0)
    MORGUE.clear()
    SHELLS.clear()


class Plain:
    pass


class OwnNew:
    def __new__(cls):
        return super().__new__(cls)


def test_only_objects_allocated_by_object_new_are_placeable():
    assert placeable(Plain()) and not placeable(OwnNew()) and not placeable(object())
    import torch

    assert not placeable(torch.empty(1))


def test_a_released_object_is_born_again_on_its_address_and_a_held_one_gets_no_shell():
    MORGUE.configure(ReusePolicy.parse("symmetric"), 0)
    dying, kept = Plain(), Plain()
    addresses = (id(dying), id(kept))
    elsewhere = [kept]
    box = [dying, kept]
    del dying, kept
    assert SHELLS.take(box) == 1 and box == []
    with placing() as counts:
        first, second = Plain(), Plain()
    SHELLS.settle()
    assert id(first) == addresses[0] and id(second) != addresses[1] and elsewhere[0] is not second
    assert counts == [1]


def test_a_placement_lands_in_a_heap_with_many_free_blocks_of_its_size():
    # Known bad: placing by freeing the shell and allocating until an instance lands on its block
    # (a search with a bound) missed here: every other one of 100,000 objects of the shell's size
    # freed after the shell was taken puts 50,000 free blocks ahead of the shell's.
    MORGUE.configure(ReusePolicy.parse("symmetric"), 0)
    box = [Plain()]
    address = id(box[0])
    assert SHELLS.take(box) == 1
    crowd = [Plain() for _ in range(100_000)]
    del crowd[::2]
    with placing() as counts:
        born = Plain()
    SHELLS.settle()
    assert id(born) == address and counts == [1]
    del crowd


def test_no_placement_where_the_rank_does_not_force_reuse():
    MORGUE.configure(ReusePolicy.parse("asymmetric:1"), 0)
    box = [Plain()]
    address = id(box[0])
    assert SHELLS.take(box) == 1
    with placing() as counts:
        born = [Plain() for _ in range(50)]
    SHELLS.settle()
    gc.collect()
    assert counts == [0] and address not in {id(b) for b in born}
