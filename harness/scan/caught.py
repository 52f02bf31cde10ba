"""Ids of caught exceptions, kept beyond the handler and looked up later.

::

    try:
        run(task)
    except Exception as exc:
        if self.routes(task):
            self._handled.add(id(exc))      # kept on the runner
    ...
    if id(error) not in self._handled:      # a later error, maybe on the dead one's address
        raise error

Python unbinds ``exc`` when the handler ends; unless the code stores the exception itself,
nothing holds it (the finding's keep-alive questions already ask that), so it dies while the
entry lives on an object that outlives the handler. Exceptions are made often, of the same
few sizes, so the next one is likely born on the freed address and passes for the handled
one: an error swallowed, a report skipped. The owner being one phase (a run, a request) does
not help, since the exception dies within a single call of it.

:func:`keeps_caught_exceptions` gives such a registry high confidence where it would
otherwise be low for not knowing how long its owner lives. A key made of the exception and
other objects (``(id(exc), id(task))``) is left to the other rules.
"""

from __future__ import annotations

import ast
from typing import Optional

from harness.scan.syntax import render


def keeps_caught_exceptions(writes: list) -> Optional[str]:
    """Why the registry keeps ids of exceptions a handler caught (one write keyed by the name
    an ``except ... as`` binds is enough: the registry is one of caught exceptions, whatever
    else its other writes key it by), or None."""
    for hit in writes:
        objects = hit.key.objects if hit.key is not None else ()
        if len(objects) != 1:
            continue
        handler = _handler_binding(hit, objects[0])
        if handler is not None:
            return (
                f"the keys are ids of {render(objects[0])}, caught by the handler at line {handler.lineno}: Python "
                "unbinds the name when the handler ends and nothing else holds the exception, so it dies while the "
                "entry lives, and a later exception born on its address passes for it"
            )
    return None


def _handler_binding(hit, obj: ast.expr) -> Optional[ast.ExceptHandler]:
    """The ``except ... as name`` around the store that binds ``obj``, or None."""
    if not isinstance(obj, ast.Name):
        return None
    parents = hit.module.parents
    current = parents.get(hit.node)
    while current is not None and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(current, ast.ExceptHandler) and current.name == obj.id:
            return current
        current = parents.get(current)
    return None
