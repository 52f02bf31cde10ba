"""TE 1.x's "is this package installed?", answered from the installed distributions' metadata.

``transformer_engine.common.is_package_installed(name)`` of TE 1.12 and 1.13 (read at both
tags) runs ``python -m pip show NAME`` in a subprocess and returns whether it exited 0. Importing
TE calls it eleven times (``transformer_engine.pytorch``, ``.jax`` and ``.paddle`` each check their
extension's packages and versions before loading it), and each call starts an interpreter that
imports pip: measured on one H100 (torch 2.11, TE 1.12.0), 14.4 s of a 20.5 s import of
``transformer_engine.pytorch``, most of the 27 s before a plain run's first verdict.

The question is whether a distribution of that name is installed, which
``importlib.metadata`` answers in this process, with the same normalisation of ``-`` and ``_``
that pip applies. :func:`install` puts a meta-path finder first in ``sys.meta_path`` that
lets ``transformer_engine.common`` load as it is and then replaces that one function with
:func:`installed`, before any module of TE that calls it is imported; a module already
imported is answered directly. Nothing else of TE changes, and every report of the TE 1.x stack
says this answer is in place (:func:`in_place`, through :func:`harness.stacks.te_common.release.run_info`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import sys

MODULE = "transformer_engine.common"
FUNCTION = "is_package_installed"
MARKER = "__harness_answer__"


def installed(package: str) -> bool:
    """Whether a distribution named ``package`` is installed (what ``pip show`` exits 0 for)."""
    try:
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


setattr(installed, MARKER, True)


def _answer(module) -> None:
    if hasattr(module, FUNCTION):
        setattr(module, FUNCTION, installed)


class _Loader(importlib.abc.Loader):
    """The real loader of ``transformer_engine.common``, then the answer put in."""

    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        _answer(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Answer TE 1.x's package checks from metadata from now on (idempotent)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    module = sys.modules.get(MODULE)
    if module is not None:
        _answer(module)


def uninstall() -> None:
    """Remove the finder (tests); a module already answered keeps its answer."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _Finder)]


def in_place() -> bool:
    """Whether TE's package checks are answered from metadata in this process: the finder is in
    place (TE not imported yet, as in a run's controller) or the loaded module answers so."""
    module = sys.modules.get(MODULE)
    if module is not None and hasattr(module, FUNCTION):
        return getattr(getattr(module, FUNCTION), MARKER, False)
    return any(isinstance(finder, _Finder) for finder in sys.meta_path)
