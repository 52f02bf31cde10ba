"""pytest plugin: fail a test that leaves an id()-keyed registry entry behind a dead object.

Zero set-up, in any project: scan the installed package and watch what the scan names::

    pytest -p harness.sentinel --sentinel-scan transformer_engine
    pytest -p harness.sentinel --sentinel-scan megatron.core,hypothesis -n 2

or name the registries (``MODULE:ATTR``, ``ATTR`` a dotted path from the module: a global, or a
class attribute ``Class.attr``)::

    pytest -p harness.sentinel --sentinel-registry pkg.fp8:FP8GlobalStateManager.fp8_param_to_autocast

The same from the ini file: ``sentinel_scan = pkg other.pkg`` and ``sentinel_registries`` (a line
list). The session header lists what is watched and what could not be, with why. A registry is
looked up again at every check, so a ``reset()`` that rebinds it is followed. Dicts (keys and
values), sets, lists and tuples are searched for ints up to four levels deep; an object that is
none of those is searched through its ``vars()``. Only ints that can be addresses count
(positive, 8-byte aligned, above 4096).

What happens per test (:mod:`.watch`):

1. Before fixtures are set up, the ints already in the registries are noted; they belong to
   earlier tests and are not judged again.
2. While the test runs (fixtures included), the builtin ``id`` is wrapped (:mod:`.id_hook`; the
   stand-in inspects, pickles and copies as the builtin, so the suite's outcomes do not change):
   every object whose id is taken is remembered with a weak reference, its type and the line
   that called ``id()``. Nothing is kept alive. A dead remembered object whose address a new
   object takes while the registries still hold it is recorded as a reuse -- exactly the bug
   this plugin exists for. ``--sentinel-no-id-hook`` turns the wrapper off (allowed with
   ``--sentinel-scan``: what is watched and how keys are tied to objects are separate choices).
3. After the test body (before fixture teardown), every new registry int not yet tied to an
   object is looked up once in ``gc.get_objects()`` (:mod:`.registries`); a live object at that
   address is remembered the same way (with its ``repr``). This catches keys made without the
   builtin ``id`` (an alias bound before the test, C code) while their object is alive.
4. After fixture teardown -- with a ``gc.collect()`` first only when a new entry's object is
   still alive (it may be cyclic garbage) -- a new registry int whose remembered object is dead fails the test
   (an error in teardown) naming the registry, the key, the object's type, the line that took
   its id and, when ``tracemalloc`` is tracing (``PYTHONTRACEMALLOC=25``), where the object was
   allocated. Ints whose object is still alive stay under watch: if one dies in a later test,
   that test's teardown reports it; what is left at the end is checked once more. The session
   summary lists every finding once (:mod:`.report`), also under pytest-xdist
   (:mod:`.distributed`).

Ignored, on purpose: ints never tied to an object (counters, sizes, keys whose object died
before any check saw it and whose id was not taken through the builtin ``id``), and objects
that cannot be weakly referenced (plain ``list``, ``dict``, ``int``...).

``--te1-onnx-standins`` puts the TE 1.x stack's ONNX stand-ins in place before any conftest
imports TE (:mod:`.standins`). Refused, as usage errors: a package ``--sentinel-scan`` cannot
find or read (:mod:`.zero_setup`), ``--sentinel-no-id-hook`` with nothing to watch, and
``--te1-onnx-standins`` after TE was imported.

Loading the plugin imports only the standard library, pytest and :mod:`harness.idreuse.containers`;
the scan is imported when ``--sentinel-scan`` is given, the registries' modules when the session
starts collecting.
"""

from harness.sentinel.plugin import pytest_addoption, pytest_configure, pytest_load_initial_conftests

__all__ = ["pytest_addoption", "pytest_configure", "pytest_load_initial_conftests"]
