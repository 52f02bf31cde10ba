"""What every blind-census reproducer needs: the pinned release or a skip, and a new object on a dead one's address."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pathlib
import sys
import warnings

import pytest

from harness.idreuse.landing import LANDING_LIMIT, land
from harness.idreuse.morgue import quiet_allocator


def require(distribution: str, version: str) -> None:
    """Skip, naming the release, unless ``distribution==version`` is the one installed."""
    try:
        found = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution}=={version} is not installed")
    if found != version:
        pytest.skip(f"reproduces {distribution}=={version}; installed is {found}")


def need(distribution: str, version: str, module: str):
    """The pinned release of ``distribution`` imported as ``module``, or a skip naming both."""
    require(distribution, version)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(module)


def module_file(distribution: str, version: str, relative: str) -> pathlib.Path:
    """A file of the pinned release's top-level package, found without importing the package."""
    require(distribution, version)
    spec = importlib.util.find_spec(distribution)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{distribution}=={version} is installed without its package directory")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / relative


class Pins:
    """The releases one census read, given as ``"name==version"``."""

    def __init__(self, *requirements: str):
        self.versions = dict(requirement.split("==") for requirement in requirements)

    def need(self, distribution: str, module: str):
        """The pinned release of ``distribution`` imported as ``module``, or a skip naming both."""
        return need(distribution, self.versions[distribution], module)

    def file(self, distribution: str, relative: str) -> pathlib.Path:
        """A file of the pinned release's package, found without importing the package."""
        return module_file(distribution, self.versions[distribution], relative)


def only_holder(box: list, what: str) -> None:
    """Fail, naming ``what``, unless ``box`` holds the only reference to its object: the
    reference ``land`` frees, so that the object dies and its address can be reused."""
    references = sys.getrefcount(box[0])   # the box's and the call's own
    assert references == 2, f"something besides the box holds {what}"


def reborn(box: list, make):
    """Free the only reference in ``box`` and return a new object born on its address."""
    with quiet_allocator():
        landing, held = land(box, make)
        born = landing.require()
        del held
    return born


def next_object(box: list, make, reuse: bool, limit: int = LANDING_LIMIT):
    """The next object and the misses to keep: born on the address of the one in ``box``
    (freed here) when ``reuse``, else made anywhere while the first is kept (the control)."""
    if not reuse:
        return make(), []
    landing, held = land(box, make, limit)
    return landing.require(), held
