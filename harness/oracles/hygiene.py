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
"""

from __future__ import annotations

import gc

from harness.idreuse.containers import discover_containers, place, registry_ints, stack_modules
from harness.idreuse.referrers import frozen_referrers, referrer_chain
from harness.idreuse.tracker import TrackedObject


def stale_ids(registries: dict, dead: dict[int, str]) -> list[str]:
    """One line per registry entry that holds the id of a dead object."""
    findings = []
    for name, registry in registries.items():
        for value, where in registry_ints(registry).items():
            if value in dead:
                findings.append(f"{place(name, where)} holds id {value:#x} of dead {dead[value]}")
    return findings


def undeclared_stale_ids(stack, declared: dict, dead: dict[int, str]) -> list[str]:
    """One line per container in the stack's modules, not among ``declared``, that holds the id of
    a dead object, named by where it was found (``package.module.NAME key``)."""
    if not dead:
        return []
    known = {id(registry) for registry in declared.values()}
    found = discover_containers(stack_modules(stack), {"stack": stack})
    findings = []
    for name, container in found.items():
        if id(container) in known:
            continue
        for value, where in registry_ints(container).items():
            if value in dead:
                findings.append(f"{place(name, where)} holds id {value:#x} of dead {dead[value]} (a container of the "
                                f"stack's not among its registries(): declare it there, or prune it)")
    return findings


def survivors(objects: list[TrackedObject], parked_ids: set[int]) -> list[str]:
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
        chain = referrer_chain(obj, ignore=(objects, lines), frozen=frozen)
        if chain is None:
            holders = [type(r).__name__ for r in gc.get_referrers(obj) if not isinstance(r, type(lines))][:3]
            held = (f"referenced by {', '.join(holders) or 'something'}, not reachable from a module global "
                    f"or class attribute")
        else:
            held = f"held by {chain}"
        lines.append(f"{o.desc} is still alive ({held})")
        del obj
    return lines
