"""Every parsed file of one scan, for questions that cross files: who calls a function.

Built by :func:`~harness.scan.scanner.scan_paths` once all files are parsed, and reached from
any :class:`~harness.scan.facts.ModuleFacts` as ``module.index``. The lifetime judge asks it
for the callers of a function that returns an id-keyed container (does every caller use the
result at once, or keep it?) and of a function whose memo parameter a caller might fill.
Modules are given their :class:`ModuleFacts` lazily, only when a call is looked for in them,
so a big tree costs one text search per name asked about.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable, Optional

from harness.scan.imports import ModulePaths
from harness.scan.syntax import callee_name

# Beyond this many files calling a name, its calls are not judged one by one.
MAX_CALLING_FILES = 25


@dataclasses.dataclass(frozen=True)
class CallSite:
    """A call of a function by its last name, and where it stands."""

    module: object          # ModuleFacts (typed loosely: facts builds on this module)
    call: ast.Call
    scope: object           # Scope


class ScanIndex:
    """The parsed files of one scan, searched for calls by name on demand."""

    def __init__(self, trees: dict[str, ast.Module], sources: dict[str, bytes], make_facts: Callable):
        self._trees = trees
        self._sources = sources
        self._make_facts = make_facts
        self._facts: dict[str, object] = {}
        self._calls: dict[str, Optional[list[CallSite]]] = {}
        self.module_paths = ModulePaths(trees)
        self._rebound: Optional[tuple[set[str], set[str]]] = None
        # attribute name -> the file that assigns it threading.local() (harness.scan.threadlocal)
        self.thread_locals: dict[str, Optional[str]] = {}

    def adopt(self, module) -> None:
        """Use ``module`` (already built by the scanner) for its path."""
        self._facts[module.path] = module

    def facts(self, path: str):
        if path not in self._facts:
            self._facts[path] = self._make_facts(path, self._trees[path])
            self._facts[path].index = self
        return self._facts[path]

    def calls_of(self, name: str) -> Optional[list[CallSite]]:
        """Every call ``name(...)`` or ``x.name(...)`` in the scanned files, or None when the
        name is called from more than :data:`MAX_CALLING_FILES` files (a name that common
        says little about which function is called, and judging every call costs memory
        and time on big trees: the caller then assumes the worst)."""
        if name not in self._calls:
            pattern = re.compile(rb"\b" + re.escape(name.encode()) + rb"\s*\(")
            paths = [path for path, source in self._sources.items() if path in self._trees and pattern.search(source)]
            if len(paths) > MAX_CALLING_FILES:
                self._calls[name] = None
                return None
            found: list[CallSite] = []
            for path in paths:
                module = self.facts(path)
                for node in ast.walk(module.tree):
                    if isinstance(node, ast.Call) and callee_name(node) == name:
                        found.append(CallSite(module, node, module.scope_of(node)))
            self._calls[name] = found
        return self._calls[name]

    def files_matching(self, pattern: "re.Pattern[bytes]") -> list[str]:
        """The scanned (parsed) files whose source ``pattern`` finds."""
        return [path for path, source in self._sources.items() if path in self._trees and pattern.search(source)]

    def rebound_names(self) -> set[str]:
        """Every name some scanned file assigns as an attribute (``x.name = ...``,
        ``setattr(x, "name", ...)``) or declares ``global`` (and so may rebind at run time):
        an object reached as ``module.name`` is replaced when one of these runs."""
        return self._rebinding()[0]

    def global_names(self) -> set[str]:
        """Every name some scanned file declares ``global`` (a module variable rebound at run time)."""
        return self._rebinding()[1]

    def replaced(self, names: list[str]) -> Optional[str]:
        """The first object on a dotted path (``V``, ``V.graph`` of ``V.graph.reg``) that a
        scanned file may replace, or None: the root when some file declares it ``global``;
        a later part when some file assigns an attribute of that name, unless the path so far
        names a scanned module (``torch._inductor.debug`` is a module, whatever
        ``config.debug = True`` elsewhere sets)."""
        for position, name in enumerate(names):
            prefix = ".".join(names[: position + 1])
            if position == 0:
                if name in self.global_names():
                    return prefix
            elif name in self.rebound_names() and self.module_paths.module(prefix, "") is None:
                return prefix
        return None

    def _rebinding(self) -> tuple[set[str], set[str]]:
        if self._rebound is None:
            found: set[str] = set()
            declared_global: set[str] = set()
            for source in self._sources.values():
                for match in _REBINDING.finditer(source):
                    attribute, set_name, declared = match.groups()
                    if attribute or set_name:
                        found.add((attribute or set_name).decode())
                    else:
                        declared_global.update(name.strip().decode() for name in declared.split(b","))
            self._rebound = (found | declared_global, declared_global)
        return self._rebound


# x.name = v (not ==), x.name += v, setattr(x, "name", v), global a, b
_REBINDING = re.compile(
    rb"\.\s*([A-Za-z_]\w*)\s*(?:[-+*/|&]?=)(?!=)"
    rb"|setattr\([^,()]+,\s*[\"']([A-Za-z_]\w*)[\"']"
    rb"|^[ \t]*global[ \t]+([\w, \t]+)",
    re.MULTILINE,
)


def callers(index: Optional[ScanIndex], name: str) -> Optional[list[CallSite]]:
    """The call sites of ``name`` in the scan; none when the module stands alone, None when
    there are too many to judge."""
    return index.calls_of(name) if index is not None else []
