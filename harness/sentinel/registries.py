"""The registry walk: the address-like ints the watched registries hold, and the live objects
at the addresses no id() call explained (found once, in the heap, after the test body)."""

from __future__ import annotations

import builtins
import gc
from typing import Iterator

from harness.idreuse.containers import registry_ints
from harness.sentinel.spec import RegistrySpec
from harness.sentinel.witness import Witness, short_repr, witness

_real_id = builtins.id
HEAP_WALK = "found at that address by a heap walk after the test body"


class Registries:
    """The watched registries, looked up again at every walk."""

    def __init__(self, specs: list[RegistrySpec]):
        self.specs = specs

    def unresolved(self) -> list[str]:
        """Why each registry that cannot be looked up now cannot (empty when all can)."""
        problems = []
        for spec in self.specs:
            try:
                spec.resolve()
            except LookupError as error:
                problems.append(str(error))
        return problems

    def ints(self) -> Iterator[tuple[str, int, str]]:
        """(registry name, address, where in the registry) of every address-like int."""
        for spec in self.specs:
            try:
                registry = spec.resolve()
            except LookupError:
                continue  # reported at collection; a registry removed later has nothing in it
            for address, where in registry_ints(registry).items():
                yield spec.name, address, where

    def present(self) -> set[tuple[str, int]]:
        return {(name, address) for name, address, _ in self.ints()}


def tie_to_heap(wanted: set[int], witnesses: dict[int, Witness], test: str) -> None:
    """Remember the live object at each of ``wanted`` (addresses no id() call explained), found
    by one walk of the heap."""
    if not wanted:
        return
    heap = gc.get_objects()
    try:
        for obj in heap:
            address = _real_id(obj)
            if address in wanted:
                witnesses[address] = witness(obj, address, HEAP_WALK, test, True)
                wanted.discard(address)
                if not wanted:
                    break
    finally:
        del heap


def describe_alive(records: list[Witness]) -> None:
    """Note the repr of each object still alive (for the report, should it die later)."""
    for record in records:
        if not record.description and record.ref is not None:
            obj = record.ref()
            if obj is not None:
                record.description = short_repr(obj)
            del obj
