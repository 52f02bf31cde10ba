"""The hazards of the fourth blind census (docs/log/2026-12-07-scan-blind-census-4.md), reproduced.

Every true hazard the census found. Each test works as those of ``test_blind_census_3.py``
do: the released code, with the dead object's address given back by force, answers for the
dead object, and answers right when the first object is kept alive (the control).

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install omegaconf==2.4.0 jsonpickle==4.1.4 objgraph==3.7.0 gradio==6.31.0 \
        panel==1.9.4 paddlepaddle==3.3.1 requests boto3
    pip install --no-deps metaflow==2.19.39
    ./scripts/test cases/blind/test_blind_census_4.py -q

Where the dead object is made inside the released code (omegaconf's node of a container built
by a resolver, paddle's program), the test holds that object in a one-item list and makes the
library build the next one with ``born_on_death_of``; everything the library runs is released
code, unchanged.
"""

from __future__ import annotations

import io
import json
import tarfile
import warnings

from cases.blind.pinned import Pins, reborn
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("omegaconf==2.4.0", "metaflow==2.19.39", "jsonpickle==4.1.4", "paddlepaddle==3.3.1",
            "objgraph==3.7.0", "gradio==6.31.0", "panel==1.9.4")


def test_omegaconf_resolves_a_new_node_to_a_dead_nodes_target():
    """base.py:594-645 caches a resolved interpolation in resolved_node_cache, the map of one
    to_container(resolve=True) call, under id() of the node selected; a node of a container
    that a resolver builds during the call (``${r0.a}`` with ``r0: ${oc.create:...}``) dies
    with that container, and a node of the next such container born on its address is
    answered with the dead node's target."""
    omegaconf = PINS.need("omegaconf", "omegaconf")
    from omegaconf.nodes import AnyNode

    omegaconf.OmegaConf.register_resolver(
        "census_mk", lambda n: {"a": "${v" + str(n) + "}"}, replace=True)

    def resolved(reuse: bool) -> object:
        cfg = omegaconf.OmegaConf.create({
            "v0": 0, "v1": 100,
            "r0": "${oc.create:${census_mk:0}}", "r1": "${oc.create:${census_mk:1}}"})
        cache: dict = {}                        # what _to_content hands every select it makes
        kept = seed_pools(lambda: object.__new__(AnyNode))
        built, _, _ = cfg._select_impl("r0.a", throw_on_missing=True,
                                       throw_on_resolution_failure=True, resolved_node_cache=cache)
        box = [built._get_node("a")]            # the built container's node, cached by id
        alive = box[0] if not reuse else None
        box[0]._set_parent(None)                # let the container go first, the node with box
        del built
        with quiet_allocator(), born_on_death_of(AnyNode, box):
            _, _, node = cfg._select_impl("r1.a", throw_on_missing=True,
                                          throw_on_resolution_failure=True,
                                          resolved_node_cache=cache)
        del kept, alive
        return node._value()

    assert resolved(reuse=True) == 0      # released: the dead node's target, v0
    assert resolved(reuse=False) == 100   # control: v1


def _package(members: dict) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            archive.addfile(info, io.BytesIO(raw))
    return buffer.getvalue()


def test_metaflow_reads_a_package_with_a_dead_archives_layout(monkeypatch):
    """packaging_sys/__init__.py:513-524 keeps each archive's layout (its .mf_install record,
    None for a package made before it) in a class-wide map under id() of the TarFile, which
    MetaflowPackage.cls_get_info opens for one call: the TarFile of the next package born on
    the dead one's address is read with the dead package's layout, and Run.code finds no INFO
    (client/core.py:848)."""
    packaging = PINS.need("metaflow", "metaflow.packaging_sys")
    from metaflow.packaging_sys.tar_backend import TarPackagingBackend

    old = _package({"INFO": {"flow_name": "OldFlow"}})
    new = _package({".mf_install": {"version": 1, "module_files": []},
                    ".mf_meta/INFO": {"flow_name": "NewFlow"}})

    def info(reuse: bool):
        monkeypatch.setattr(packaging.MetaflowCodeContent, "_cached_mfcontent_info", {})
        kept = seed_pools(lambda: object.__new__(tarfile.TarFile))
        box = [TarPackagingBackend.cls_open(io.BytesIO(old))]    # what cls_get_info opens
        packaging.MetaflowCodeContent.get_archive_info(box[0], TarPackagingBackend)
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(tarfile.TarFile, box):
            archive = TarPackagingBackend.cls_open(io.BytesIO(new))
        answer = packaging.MetaflowCodeContent.get_archive_info(archive, TarPackagingBackend)
        del kept, alive
        return answer

    assert info(reuse=True) is None                        # released: read as a V0 package
    assert info(reuse=False) == {"flow_name": "NewFlow"}   # control


class _Blob:
    """An object whose state is a fresh bytes object per pickling (a compressed payload, say).

    ``states`` holds the first state once jsonpickle has dropped it; with ``reuse``, the next
    object's state is born on its address."""

    states: list = []

    def __init__(self, text: str, reuse: bool):
        self.text, self.reuse = text, reuse

    def __getstate__(self):
        if self.states and self.reuse:
            return reborn(self.states, lambda: self.text.encode())
        state = self.text.encode()
        self.states.append(state)
        return state

    def __setstate__(self, state):
        self.text = state.decode()
        self.reuse = False


def test_jsonpickle_writes_a_dead_states_bytes():
    """pickler.py:358-366 memoises each flattened object under id() when make_refs=False or
    unpicklable=False; every object but bytes is kept alive in _seen for the call, and the
    memo's value for bytes ({"py/b64": ...}) does not hold them: a fresh bytes state of the
    next object born on a dead state's address is written as the dead state."""
    jsonpickle = PINS.need("jsonpickle", "jsonpickle")

    def texts(reuse: bool) -> list:
        _Blob.states.clear()
        kept = seed_pools(lambda: "x".encode() * 12)
        items = [_Blob("payload-0000", reuse), _Blob("payload-0001", reuse)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            encoded = jsonpickle.encode(items, make_refs=False)
            decoded = jsonpickle.decode(encoded)
        del kept
        return [blob.text for blob in decoded]

    assert texts(reuse=True) == ["payload-0000", "payload-0000"]    # released: the dead state
    assert texts(reuse=False) == ["payload-0000", "payload-0001"]   # control


def test_paddle_executor_runs_a_dead_programs_pruned_copy(monkeypatch):
    """base/executor.py:660-677 keys the executor's pruned-program cache (:1980, run with
    use_prune=True, legacy program IR) by the names of block 0's variables, the feed and fetch
    names, and id() of the program; the cache keeps the pruned copy, not the program: a program
    built under unique_name.guard() (the same names) born on a dead one's address runs the dead
    program's pruned copy."""
    monkeypatch.setenv("FLAGS_enable_pir_api", "0")
    paddle = PINS.need("paddlepaddle", "paddle")
    import numpy as np

    paddle.set_flags({"FLAGS_enable_pir_api": False})
    paddle.enable_static()
    try:
        program_class = paddle.static.Program

        def build(program, scale: float) -> str:
            with paddle.static.program_guard(program, paddle.static.Program()), \
                    paddle.utils.unique_name.guard():
                x = paddle.static.data("x", [1], "float32")
                y = x * scale
                y + 1.0                             # not fetched: pruned away
            return y.name

        def output(reuse: bool) -> float:
            exe = paddle.static.Executor(paddle.CPUPlace())
            feed = {"x": np.ones(1, "float32")}
            box = [program_class()]
            name = build(box[0], 2.0)
            exe.run(box[0], feed=feed, fetch_list=[name], use_prune=True)
            alive = box[0] if not reuse else None
            for block in box[0].blocks:           # a block points back at its program: let
                block.program = None              # the program go with box, not with a collection
            with quiet_allocator(), born_on_death_of(program_class, box):
                second = program_class()
            build(second, 3.0)
            out, = exe.run(second, feed=feed, fetch_list=[name], use_prune=True)
            del alive
            return float(out[0])

        assert output(reuse=True) == 2.0     # released: the dead program's scale
        assert output(reuse=False) == 3.0    # control
    finally:
        paddle.disable_static()


def test_objgraph_get_new_ids_misses_a_new_object_on_a_dead_ones_address():
    """objgraph.py:338-431 remembers, between calls, the ids of every object gc tracks and
    reports as new those whose id it did not see last time: a new object born on the address
    of one that died since is not reported."""
    objgraph = PINS.need("objgraph", "objgraph")

    class Batch:
        pass

    def reported(reuse: bool) -> bool:
        state: dict = {}                           # the call's state, apart from other callers'
        kept = seed_pools(lambda: object.__new__(Batch))
        box = [Batch()]
        objgraph.get_new_ids(limit=0, _state=state)
        objgraph.get_new_ids(limit=0, _state=state)
        alive = box[0] if not reuse else None
        later = reborn(box, Batch) if reuse else Batch()
        new = objgraph.get_new_ids(limit=0, _state=state)
        del kept, alive
        return id(later) in new.get("Batch", set())

    assert reported(reuse=True) is False     # released: the new Batch is not reported
    assert reported(reuse=False) is True     # control


class _Query:
    """An argument hashed by identity: any object without __eq__ (a torch.Tensor is one too)."""

    def __init__(self, text: str):
        self.text = text


def _cached_answer(cache, reuse: bool) -> str:
    """The second answer of ``cache``-decorated shout(): for a new argument, the first one
    dead (``reuse``: the new one born on its address) or kept alive (the control)."""
    @cache
    def shout(query):
        return query.text.upper()

    kept = seed_pools(lambda: object.__new__(_Query))
    box = [_Query("first")]
    shout(box[0])
    later = reborn(box, lambda: _Query("second")) if reuse else _Query("second")
    del kept
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shout(later)


def test_gradio_cache_answers_a_new_argument_with_a_dead_ones_result():
    """caching.py:77-78 hashes an argument gr.cache cannot hash by content with repr(hash(obj)),
    the identity hash of an object without __eq__, and the decorated function's store keeps the
    result, not the argument: an argument born on a dead one's address gets its result."""
    gradio = PINS.need("gradio", "gradio")

    assert _cached_answer(gradio.cache, reuse=True) == "FIRST"     # released: the dead one's
    assert _cached_answer(gradio.cache, reuse=False) == "SECOND"   # control


def test_panel_cache_answers_a_new_argument_with_a_dead_ones_result():
    """io/cache.py:260-280 hashes an argument pn.cache has no hash function for by id(), and
    state._memoize_cache (:497-509) keeps the result, not the argument: an argument born on a
    dead one's address gets its result."""
    panel = PINS.need("panel", "panel")

    panel.state.clear_caches()        # the memo is keyed by the function's name: start empty
    assert _cached_answer(panel.cache, reuse=True) == "FIRST"      # released: the dead one's
    panel.state.clear_caches()
    assert _cached_answer(panel.cache, reuse=False) == "SECOND"    # control
