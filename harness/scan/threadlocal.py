"""Containers kept in thread-local storage of a long-lived object, reached through a
parameter:

    class Experiment:
        def __init__(self):
            self._localstorage = threading.local()

    def add_mapping(scaled, loss, experiment):
        experiment._localstorage.pytorch["loss_mapping"][scaled] = loss

The container is not the caller's to drop after the call: it lives in storage that some
scanned file made with ``threading.local()`` to keep state across calls for a thread's whole
run, while the keyed objects come and go. Every function reaching it by that path uses the
one registry.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from harness.scan.syntax import render, root_of

_MADE = rb"\s*=\s*(?:threading\.)?local\(\)"


def thread_local(expr: ast.expr, place) -> Optional[tuple[str, str]]:
    """``(identity, where)`` when ``expr`` (``p.a.b[k]``, ``p`` a parameter) passes through an
    attribute that a scanned file assigns ``threading.local()``; None otherwise."""
    root, parts = root_of(expr)
    if not isinstance(root, ast.Name) or not parts:
        return None
    attributes = parts[: parts.index("[]")] if "[]" in parts else parts
    index = getattr(place.module, "index", None)
    if index is None:
        return None
    found = index.thread_locals
    shown = render(expr)
    for attribute in attributes:
        if attribute not in found:
            pattern = re.compile(rb"\.\s*" + re.escape(attribute.encode()) + _MADE)
            paths = index.files_matching(pattern)
            found[attribute] = paths[0] if paths else None
        if found[attribute] is not None:
            marker = f".{attribute}"
            rest = shown[shown.index(marker) + len(marker):] if marker in shown else ""
            return f"{attribute}{rest} (thread-local)", found[attribute]
    return None
