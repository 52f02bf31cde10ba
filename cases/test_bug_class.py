"""The wider bug class, beyond TE #1326: each model's buggy form fails the hygiene oracle and
returns a stale answer once a dead object's address comes back; the fixed form passes both.

The dead object's address is handed to the new object the way CPython does it: the most
recently freed block of a size class is the next one allocated (both objects are of one class).
"""

from __future__ import annotations

import gc

import pytest

from harness.classcases import mesh_cache, quantizer_key, result_cache
from harness.idreuse.tracker import TrackedObject
from harness.oracles.hygiene import stale_ids

import weakref


def _dead(objs, names):
    """Record the objects (weakly), then let them die: {id: description} of the dead ones."""
    records = [TrackedObject(id(o), weakref.ref(o), "model", n) for o, n in zip(objs, names)]
    return records


def _bury(records):
    gc.collect()
    return {r.ident: r.desc for r in records if not r.alive()}


def _same_address(cls, dead_id, make, limit=10000):
    """Allocate objects of ``cls`` until one lands on ``dead_id`` (kept: the others are held)."""
    held = []
    for _ in range(limit):
        obj = make()
        if id(obj) == dead_id:
            return obj, held
        held.append(obj)
    pytest.fail(f"no {cls.__name__} landed on the dead object's address in {limit} allocations")


@pytest.mark.parametrize("form", ["buggy", "fixed"])
def test_mesh_coordinates_after_a_submesh_dies(form):
    cache = (mesh_cache.BuggyCoordinateCache if form == "buggy" else mesh_cache.FixedCoordinateCache)()
    sub = mesh_cache.Mesh((2, 2), rank=3)
    assert cache.coordinates(sub) == (1, 1)
    records = _dead([sub], ["submesh (2, 2) rank 3"])
    dead_id = id(sub)
    del sub
    dead = _bury(records)
    findings = stale_ids(cache.registries(), dead)
    new, _held = _same_address(mesh_cache.Mesh, dead_id, lambda: mesh_cache.Mesh((4,), rank=1))
    answer = cache.coordinates(new)
    if form == "buggy":
        assert findings, "hygiene must flag the dead submesh's id"
        assert answer == (1, 1) and new.coordinates() == (1,), "the new mesh got the dead submesh's coordinates"
    else:
        assert findings == []
        assert answer == new.coordinates() == (1,)


@pytest.mark.parametrize("form", ["buggy", "fixed"])
def test_result_cache_false_hit_after_collection(form):
    cache = (result_cache.BuggyResultCache if form == "buggy" else result_cache.FixedResultCache)()
    old = result_cache.Artifact("weights-v1")
    assert cache.digest(old) == "digest(weights-v1)"
    records = _dead([old], ["artifact weights-v1"])
    dead_id = id(old)
    del old
    dead = _bury(records)
    findings = stale_ids(cache.registries(), dead)
    new, _held = _same_address(result_cache.Artifact, dead_id, lambda: result_cache.Artifact("weights-v2"))
    answer = cache.digest(new)
    if form == "buggy":
        assert findings and answer == "digest(weights-v1)", (findings, answer)
    else:
        assert findings == [] and answer == "digest(weights-v2)", (findings, answer)


@pytest.mark.parametrize("form", ["buggy", "fixed"])
def test_recipe_state_keyed_by_replaced_quantizers(form):
    cache = (quantizer_key.BuggyRecipeStateCache if form == "buggy" else quantizer_key.FixedRecipeStateCache)()
    old = [quantizer_key.Quantizer(448.0)]
    assert cache.state(old) == (448.0,)
    records = _dead(old, ["quantizer scale 448"])
    dead_id = id(old[0])
    old.clear()
    dead = _bury(records)
    findings = stale_ids(cache.registries(), dead)
    new, _held = _same_address(quantizer_key.Quantizer, dead_id, lambda: quantizer_key.Quantizer(57344.0))
    answer = cache.state([new])
    if form == "buggy":
        assert findings and answer == (448.0,), (findings, answer)
    else:
        assert findings == [] and answer == (57344.0,), (findings, answer)
