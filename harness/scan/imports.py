"""Which scanned file a module-level import names, so that state is one registry in every
file that reaches it.

``_cache = {}`` in ``pkg/state.py`` is the same container as ``state._cache`` after
``from pkg import state`` and as ``_cache`` after ``from pkg.state import _cache``: stores
and reads in three files are uses of one registry, judged together and reported once. A
dotted module name is matched against the scanned paths by its trailing components
(``pkg.state`` is ``.../pkg/state.py`` or ``.../pkg/state/__init__.py``), and only when one
file matches; a relative import is resolved from the importing file's directory. An import
the scan cannot place is left as it was: a name of the importing module.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from typing import Iterable, Optional


@dataclasses.dataclass(frozen=True)
class Imported:
    """A module-level import binding: the module's file, and the name imported from it
    (None when the binding is the module itself)."""

    path: str
    name: Optional[str] = None


class ModulePaths:
    """The scanned files by the dotted names they can be imported as."""

    def __init__(self, paths: Iterable[str]):
        self._paths = set(paths)
        self._by_suffix: dict[str, set[str]] = {}
        for path in self._paths:
            parts = _module_parts(path)
            for start in range(len(parts)):
                self._by_suffix.setdefault(".".join(parts[start:]), set()).add(path)

    def module(self, dotted: str, importer: str, level: int = 0) -> Optional[str]:
        """The file of module ``dotted`` as imported from ``importer`` (``level`` leading dots)."""
        if level:
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            return self._file_at(os.path.join(base, *dotted.split("."))) if dotted else self._file_at(base)
        found = self._by_suffix.get(dotted, set())
        return next(iter(found)) if len(found) == 1 else None

    def submodule(self, package: str, name: str) -> Optional[str]:
        """The file of module ``name`` inside the package whose ``__init__.py`` is ``package``."""
        if os.path.basename(package) != "__init__.py":
            return None
        return self._file_at(os.path.join(os.path.dirname(package), name))

    def _file_at(self, stem: str) -> Optional[str]:
        for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
            normal = os.path.normpath(candidate)
            if normal in self._paths:
                return normal
            if candidate in self._paths:
                return candidate
        return None


def _module_parts(path: str) -> list[str]:
    stem, _ = os.path.splitext(os.path.normpath(path))
    parts = [part for part in stem.split(os.sep) if part not in ("", ".")]
    return parts[:-1] if parts and parts[-1] == "__init__" else parts


def module_imports(tree: ast.Module, path: str, paths: ModulePaths) -> dict[str, Imported]:
    """The module-level names ``tree`` binds by importing a scanned file (or a name of one);
    imports inside top-level ``if``/``try`` blocks count."""
    found: dict[str, Imported] = {}
    for statement in _top_level(tree.body):
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    target = paths.module(alias.name, path)
                    if target is not None:
                        found[alias.asname] = Imported(target)
                else:
                    head = alias.name.split(".")[0]
                    target = paths.module(head, path)
                    if target is not None:
                        found[head] = Imported(target)
        elif isinstance(statement, ast.ImportFrom):
            source = paths.module(statement.module or "", path, statement.level)
            if source is None:
                continue
            for alias in statement.names:
                if alias.name == "*":
                    continue
                submodule = paths.submodule(source, alias.name)
                found[alias.asname or alias.name] = Imported(submodule) if submodule else Imported(source, alias.name)
    return found


def _top_level(body: list[ast.stmt]):
    for statement in body:
        yield statement
        if isinstance(statement, (ast.If, ast.Try)):
            blocks = [statement.body, statement.orelse]
            if isinstance(statement, ast.Try):
                blocks += [handler.body for handler in statement.handlers] + [statement.finalbody]
            for block in blocks:
                yield from _top_level(block)


def follow(imported: Imported, parts: list[str], paths: ModulePaths) -> tuple[str, list[str]]:
    """The file a name reached through ``imported`` lives in, and the attribute path in it:
    ``state._cache`` gives ``(".../state.py", ["_cache"])``; submodules are followed
    (``pkg.state._cache`` after ``import pkg``)."""
    path = imported.path
    rest = ([imported.name] if imported.name else []) + list(parts)
    while rest and imported.name is None:
        inner = paths.submodule(path, rest[0])
        if inner is None:
            break
        path, rest = inner, rest[1:]
    return path, rest
