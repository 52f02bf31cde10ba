"""The wider bug class, beyond TE #1326: each model's buggy form fails the hygiene oracle and
returns a stale answer once a dead object's address comes back; the fixed form passes both.

The dead object's address is handed to the new object the way CPython does it: the most
recently freed block of a size class is the next one allocated (both objects are of one class).
Each scenario runs from the victim's birth to the new object's birth with the collector off
(:func:`quiet_allocator`), so no garbage left by earlier tests is freed in between, ahead of
the victim's block. A neighbour of the victim's class is born right after it and outlives it:
it keeps the victim's pool in use, since a pool whose last live block is freed goes back to
its arena and its blocks may next be served in another size class.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from harness.classcases import mesh_cache, quantizer_key, result_cache
from harness.idreuse.morgue import land_on, probe_slots, quiet_allocator
from harness.idreuse.tracker import TrackedObject
from harness.oracles.hygiene import stale_ids


def _record(obj, desc: str) -> TrackedObject:
    """A weak record of ``obj``, as the harness keeps for every model object."""
    return TrackedObject(id(obj), weakref.ref(obj), "model", desc)


def _dead(records) -> dict[int, str]:
    """{id: description} of the recorded objects that have died."""
    return {r.ident: r.desc for r in records if not r.alive()}


def _replaced(box: list, desc: str, make):
    """Kill the one object in ``box`` (its only reference); return a weak record of it and an
    object born at its address, from allocating with ``make`` until one lands on its block.

    The record and the probe list are made before the free (:func:`probe_slots`), so neither
    can take the block.
    """
    record = _record(box[0], desc)
    dead_id, cls_name = id(box[0]), type(box[0]).__name__
    slots = probe_slots()
    box.clear()
    new = land_on(dead_id, make, slots)
    if new is None:
        pytest.fail(f"no {cls_name} landed on the dead object's address in {len(slots)} "
                    "allocations: something else took its block and kept it. Re-run this test "
                    "alone to see whether an earlier test leaves a thread allocating.")
    return record, new


@pytest.mark.parametrize("form", ["buggy", "fixed"])
def test_mesh_coordinates_after_a_submesh_dies(form):
    cache = (mesh_cache.BuggyCoordinateCache if form == "buggy" else mesh_cache.FixedCoordinateCache)()
    with quiet_allocator():
        sub = [mesh_cache.Mesh((2, 2), rank=3)]
        _neighbour = mesh_cache.Mesh((2, 2), rank=0)
        assert cache.coordinates(sub[0]) == (1, 1)
        record, new = _replaced(sub, "submesh (2, 2) rank 3", lambda: mesh_cache.Mesh((4,), rank=1))
    findings = stale_ids(cache.registries(), _dead([record]))
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
    with quiet_allocator():
        old = [result_cache.Artifact("weights-v1")]
        _neighbour = result_cache.Artifact("weights-v0")
        assert cache.digest(old[0]) == "digest(weights-v1)"
        record, new = _replaced(old, "artifact weights-v1", lambda: result_cache.Artifact("weights-v2"))
    findings = stale_ids(cache.registries(), _dead([record]))
    answer = cache.digest(new)
    if form == "buggy":
        assert findings and answer == "digest(weights-v1)", (findings, answer)
    else:
        assert findings == [] and answer == "digest(weights-v2)", (findings, answer)


@pytest.mark.parametrize("form", ["buggy", "fixed"])
def test_recipe_state_keyed_by_replaced_quantizers(form):
    cache = (quantizer_key.BuggyRecipeStateCache if form == "buggy" else quantizer_key.FixedRecipeStateCache)()
    with quiet_allocator():
        old = [quantizer_key.Quantizer(448.0)]
        _neighbour = quantizer_key.Quantizer(1.0)
        assert cache.state(old) == (448.0,)
        record, new = _replaced(old, "quantizer scale 448", lambda: quantizer_key.Quantizer(57344.0))
    findings = stale_ids(cache.registries(), _dead([record]))
    answer = cache.state([new])
    if form == "buggy":
        assert findings and answer == (448.0,), (findings, answer)
    else:
        assert findings == [] and answer == (57344.0,), (findings, answer)


def test_reuse_is_forced_on_a_heap_full_of_cyclic_garbage():
    """The scenario above on a heap that made it miss when a collection ran between the victim's
    death and the new object's birth: 20,000 garbage cycles interleaved with live objects of the
    victim's size class, waiting to be collected."""
    class Cycle:
        pass

    survivors = []
    gc.disable()                 # the cycles must still be waiting when the scenario starts
    try:
        for i in range(20_000):
            c = Cycle()
            c.self_ref = (c, i)
            survivors.append((i, i))
        del c
        cache = result_cache.BuggyResultCache()
        with quiet_allocator():
            old = [result_cache.Artifact("weights-v1")]
            _neighbour = result_cache.Artifact("weights-v0")
            cache.digest(old[0])
            _record_of_old, new = _replaced(old, "artifact weights-v1", lambda: result_cache.Artifact("weights-v2"))
    finally:
        gc.enable()
    assert cache.digest(new) == "digest(weights-v1)"
