"""Registry hygiene: after a model died, no registry holds a dead object's id, no model object lives.

Called by the case executor after each model's death (destroy, delete, collect):

* :func:`stale_ids` -- the registries the stack declares (``registries()``), walked through dict
  keys and values, sets, lists and tuples; every int found is compared with the ids of the
  model's dead (or parked) objects;
* :func:`undeclared_stale_ids` -- the same for every container found by name in the stack's own
  modules that it does not declare (module globals, class attributes, attributes of module-level
  objects and of the stack, closures of hooks: :mod:`harness.idreuse.containers`, which the
  pytest sentinel plugin shares), each reported under its dotted name;
* :func:`survivors` -- model objects still alive, each with the chain of references that keeps
  it (:mod:`harness.idreuse.referrers`).

:func:`scan_registries` does the first two for the case executor and says, for each stale entry,
whose id was stored there and by which case and model (:class:`EntryOrigins`, kept per rank from
case to case): an entry left by an earlier case, whose int a later object happens to reuse, is the
earlier case's finding (reported there), not the later case's; the later case gets a note.
"""

from __future__ import annotations

import dataclasses
import gc

from harness.idreuse.containers import discover_containers, place, registry_ints, stack_modules
from harness.idreuse.referrers import find_chain, frozen_referrers
from harness.idreuse.tracker import TrackedObject


UNDECLARED = " (a container of the stack's not among its registries(): declare it there, or prune it)"


def stale_ids(registries: dict, dead: dict[int, str]) -> list[str]:
    """One line per registry entry that holds the id of a dead object."""
    findings = []
    for name, registry in registries.items():
        for value, where in registry_ints(registry).items():
            if value in dead:
                findings.append(f"{place(name, where)} holds id {value:#x} of dead {dead[value]}")
    return findings


def undeclared_containers(stack, declared: dict) -> dict:
    """The containers found by name in the stack's modules (and on the stack) that are not among
    ``declared``, by dotted name."""
    known = {id(registry) for registry in declared.values()}
    found = discover_containers(stack_modules(stack), {"stack": stack})
    return {name: c for name, c in found.items() if id(c) not in known}


def undeclared_stale_ids(stack, declared: dict, dead: dict[int, str]) -> list[str]:
    """One line per container in the stack's modules, not among ``declared``, that holds the id of
    a dead object, named by where it was found (``package.module.NAME key``)."""
    if not dead:
        return []
    return [line + UNDECLARED for line in stale_ids(undeclared_containers(stack, declared), dead)]


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where an int in a container was first seen: after which case's model died, the dead object
    whose id it was then (None when it was no dead object's id), and what that id was the id of
    (``the id of a weight``; None when not said)."""

    case: str
    model: int
    stored_for: str | None
    what: str | None = None

    def stored(self) -> str:
        """``stored for OBJECT, WHAT, in case C, model M``, for an entry a line charges to its origin."""
        if self.stored_for is None:
            return f"stored for an object (what it was the id of is not known) in case {self.case}, model {self.model}"
        what = f", {self.what}," if self.what else ""
        return f"stored for {self.stored_for}{what} in case {self.case}, model {self.model}"


class EntryOrigins:
    """Per rank, for every container a hygiene scan walks, the :class:`Origin` of each address-like
    int in it, and the last case that changed it. Ints that left a container are forgotten at its
    next scan, so an int stored again later gets a new origin.

    A container *changed* between two scans when its ints differ, or, for a dict, when one of its
    values was replaced (``REG[id(w)] = key`` stored again puts a new value object there, where the
    int alone looks the same). A set given the same int again does not change: a case that only
    does that is indistinguishable from one that never touched the set."""

    def __init__(self):
        self._by_container: dict[str, dict[int, Origin]] = {}
        self._fingerprints: dict[str, tuple] = {}
        self._changed_in: dict[str, str] = {}

    def update(self, name: str, container, ints: dict[int, str], dead: dict[int, str], case: str,
               model: int, ids_of: dict[int, str] | None = None) -> dict[int, Origin]:
        old = self._by_container.get(name, {})
        new = {value: old.get(value) or Origin(case, model, dead.get(value), (ids_of or {}).get(value))
               for value in ints}
        self._by_container[name] = new
        values = tuple(map(id, list(container.values()))) if isinstance(container, dict) else ()
        fingerprint = (frozenset(ints), values)
        if self._fingerprints.get(name) != fingerprint:
            self._fingerprints[name] = fingerprint
            self._changed_in[name] = case
        return new

    def changed_in(self, name: str) -> str | None:
        """The last case during which ``name`` changed (as of its last scan)."""
        return self._changed_in.get(name)

    def clear(self) -> None:
        self._by_container.clear()
        self._fingerprints.clear()
        self._changed_in.clear()


@dataclasses.dataclass(frozen=True)
class StaleEntry:
    """A dead object's id found in a container: the line for people, and the container's name
    (the failure's identity)."""

    line: str
    registry: str


@dataclasses.dataclass(frozen=True)
class Survivor:
    """A model object still alive: the line for people, and what holds it (the root of the chain
    of references: a module global or class attribute; ``unreferenced`` when none was found)."""

    line: str
    holder: str


@dataclasses.dataclass
class Scan:
    """A hygiene scan's findings: ``failures`` charged to this case, ``notes`` about entries an
    earlier case stored (and was charged with)."""

    failures: list[StaleEntry] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    walked: dict = dataclasses.field(default_factory=dict)     # every container scanned, by name


def scan_registries(stack, declared: dict, dead: dict[int, str], origins: EntryOrigins, case: str, model: int,
                    ids_of: dict[int, str] | None = None) -> Scan:
    """The stale ids of :func:`stale_ids` and :func:`undeclared_stale_ids` in one pass, each line
    naming the object whose id was stored and the case and model that stored it, and what that
    id was the id of (``ids_of``, :func:`harness.idreuse.tracker.what_ids_were`: a weight, a
    module, an activation, a process group or optimizer the model held, or that it is not known).

    An entry first seen in this case is this case's failure. One an earlier case stored, in a
    container this case did not change, is a note (its failure was that case's, with that case's
    repro command), whatever object of this case now has its int as id; in a container this case
    changed, this case may have stored it again, and it is this case's failure too, naming the
    first store, and what the id was the id of then (a later object may have had its address)."""
    scan = Scan()
    if not dead:
        return scan
    found = [(name, registry, "") for name, registry in declared.items()]
    found += [(name, c, UNDECLARED) for name, c in undeclared_containers(stack, declared).items()]
    scan.walked = {name: container for name, container, _ in found}
    for name, container, suffix in found:
        ints = registry_ints(container)
        firsts = origins.update(name, container, ints, dead, case, model, ids_of)
        for value, where in ints.items():
            if value not in dead:
                continue
            origin = firsts[value]
            text = f"{place(name, where)} holds id {value:#x}"
            what = f", {ids_of[value]}" if ids_of and value in ids_of else ""
            if origin.case != case and origins.changed_in(name) != case:
                scan.notes.append(f"{text}, stored for {origin.stored_for or 'an object'} in case {origin.case}, "
                                  f"model {origin.model} (that case's finding), is now also the id of dead "
                                  f"{dead[value]} of model {model}")
            elif origin.model == model and origin.stored_for in (None, dead[value]):
                scan.failures.append(StaleEntry(f"{text} of dead {dead[value]}{what}, stored in case {case}, "
                                                f"model {model}{suffix}", name))
            else:      # what it was the id of is what it was when stored, not what had its address since
                scan.failures.append(StaleEntry(f"{text} of dead {dead[value]}, {origin.stored()}{suffix}", name))
    return scan


def survivors(objects: list[TrackedObject], parked_ids: set[int]) -> list[Survivor]:
    """Model objects still alive after the model was deleted and collected, each with the chain of
    references from a module global or class attribute that keeps it alive (also where the
    runner's ``gc.freeze`` hid the module's dict from the collector's referrer search)."""
    lines = []
    frozen = None
    for o in objects:
        if o.kind != "model" or o.ident in parked_ids:
            continue
        obj = o.ref()
        if obj is None:
            continue
        frozen = frozen if frozen is not None else frozen_referrers()   # once, and only for a survivor
        chain = find_chain(obj, ignore=(objects, lines), frozen=frozen)
        if chain is None:
            holders = [type(r).__name__ for r in gc.get_referrers(obj) if not isinstance(r, type(lines))][:3]
            held = (f"referenced by {', '.join(holders) or 'something'}, not reachable from a module global "
                    f"or class attribute")
            root = "unreferenced"
        else:
            held = f"held by {chain.text}"
            root = chain.root
        lines.append(Survivor(f"{o.desc} is still alive ({held})", root))
        del obj
    return lines
