"""The hazards of part A of the sixth blind census (docs/log/2026-12-07-scan-blind-census-6-a.md), reproduced.

Each test works as those of ``test_blind_census_5.py`` do: the released code, with the dead
object's address given back by force, answers for the dead object, and answers right when the
first object is kept alive (the control). Part A of the census found ten true hazards; each
has its test here.

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --target DIR cachey==0.2.1 klepto==0.2.8 cacheout==0.17.0 typedload==2.41 \
        jsonref==1.1.0 bravado-core==6.4.1 perscache==0.7.1 doorget==1.1 \
        async-lru-cache==0.2.0 onnx
    pip install --no-deps --target DIR onnxsim==0.8.1
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_6_a.py -q

Where the reproducer makes the next object itself (an argument, a union type, a schema, a
model, an instance), it holds the first one in a one-item list and makes the next with
``reborn``; where the library makes it (the references of a document jsonref loads while it
walks), the test holds the first reference in a one-item list and ``born_on_death_of`` places
the next one.
Everything the library runs is released code, unchanged.
"""

from __future__ import annotations

import asyncio
import datetime
import logging

from cases.blind.pinned import Pins, reborn
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("cachey==0.2.1", "klepto==0.2.8", "cacheout==0.17.0", "typedload==2.41",
            "jsonref==1.1.0", "bravado-core==6.4.1", "onnxsim==0.8.1", "perscache==0.7.1",
            "doorget==1.1", "async-lru-cache==0.2.0")


class _Account:
    """An argument of the plain kind: no __eq__ or __hash__ of its own, so hash() is identity."""

    def __init__(self, balance: int):
        self.balance = balance


def _balance(account: _Account) -> int:
    return account.balance


def _answers(call, make_first, make_next, seed, reuse: bool) -> tuple:
    """``call``'s answers for a first object and for the next one: born on the first one's
    address once it is dropped (``reuse``), or made while the first is kept alive (the control).
    ``seed`` makes objects of the first one's size class, to seed its pool."""
    kept = seed_pools(seed)
    box = [make_first()]
    first = call(box[0])
    alive = box[0] if not reuse else None
    later = reborn(box, make_next) if reuse else make_next()
    result = call(later)
    del alive, kept
    return first, result


def _memoized_balance(memoize, reuse: bool) -> int:
    """The balance a memoized reader gives for a second account, made after the first is dropped."""
    first, result = _answers(memoize(_balance), lambda: _Account(5), lambda: _Account(70),
                             lambda: object.__new__(_Account), reuse)
    assert first == 5
    return result


def test_cachey_memoize_returns_a_dead_arguments_result():
    """cachey/cache.py:10-16 keys an unhashable argument by id() (memo_key), and Cache.memoize
    (:176-199) keeps only the result: a list born on a dead list's address gets its result."""
    cachey = PINS.need("cachey", "cachey")

    def total(reuse: bool) -> int:
        first, result = _answers(cachey.Cache(1e6).memoize(sum), lambda: [1, 2],
                                 lambda: [10, 20], lambda: [0, 0], reuse)
        assert first == 3
        return result

    assert total(reuse=True) == 3      # released: the dead list's sum
    assert total(reuse=False) == 30    # control


def test_klepto_cache_returns_a_dead_arguments_result():
    """klepto's caches key a call by hashmap(flat=True) (_cache.py:85, keymaps.py:264-271), Python's
    hash() of the arguments, and keep only the result: an argument with identity hash born on a
    dead argument's address gets the dead one's result."""
    klepto = PINS.need("klepto", "klepto")
    assert _memoized_balance(klepto.lru_cache(), reuse=True) == 5     # released: dead result
    assert _memoized_balance(klepto.lru_cache(), reuse=False) == 70   # control


def test_async_lru_cache_returns_a_dead_arguments_result():
    """async_lru_cache/cache.py:73-149 keys a call by the string f"alru:{hash(tuple(parts))}",
    where an argument with identity hash is a part as it is: the cache keeps nothing that pins
    it, and an argument born on a dead one's address gets the dead one's result."""
    async_lru_cache = PINS.need("async-lru-cache", "async_lru_cache")

    def memoize(function):
        cached = async_lru_cache.alru_cache()(_as_coroutine(function))
        return lambda account: asyncio.run(cached(account))

    assert _memoized_balance(memoize, reuse=True) == 5      # released: the dead result
    assert _memoized_balance(memoize, reuse=False) == 70    # control


def _as_coroutine(function):
    async def call(*args):
        return function(*args)
    call.__name__ = function.__name__
    call.__qualname__ = function.__qualname__
    return call


def test_cacheout_memoize_returns_a_dead_arguments_result():
    """cacheout/cache.py:650-760 keys a memoized call by md5 of the arguments' hash() values and
    keeps only the result: an argument with identity hash born on a dead argument's address gets
    the dead one's result."""
    cacheout = PINS.need("cacheout", "cacheout")
    memoize = cacheout.Cache().memoize()
    assert _memoized_balance(memoize, reuse=True) == 5                        # released
    assert _memoized_balance(cacheout.Cache().memoize(), reuse=False) == 70   # control


def test_typedload_loads_into_a_dead_unions_members():
    """typedload/dataloader.py:750-790 keeps a Loader's sorted union members under id(type_); the
    Loader's index cache (:322-336) keeps the first union of given members as a key, not the equal
    ones made at later calls: such a union, dead, and a union of other members born on its
    address is loaded as the dead one."""
    dataloader = PINS.need("typedload", "typedload.dataloader")

    def load(reuse: bool):
        loader = dataloader.Loader()              # reused, as typedload recommends
        assert loader.load(3.0, int | str) == 3   # this union stays a key of the index cache
        kept = seed_pools(lambda: int | str)
        box = [int | str]                         # an equal union, made at the next call
        assert loader.load(3.0, box[0]) == 3
        alive = box[0] if not reuse else None
        later = reborn(box, lambda: float | bytes) if reuse else float | bytes
        result = loader.load("2.5", later)
        del alive, kept
        return result

    assert load(reuse=True) == "2.5"   # released: loaded as the dead union's str
    assert load(reuse=False) == 2.5    # control: float


def test_jsonref_replaces_a_new_reference_with_a_dead_ones_target():
    """jsonref.py:261-283 keeps _processed[id(ref)] -> target while the walk replaces each ref in
    its parent (the ref dies); replace_refs(proxies=False) walks while loading remote documents
    (:121-140), whose new references can be born on a dead reference's address: the walk then
    puts the dead reference's target in their place."""
    jsonref = PINS.need("jsonref", "jsonref")
    remote = {"defs": {"x": {"properties": {"inner": {"$ref": "#/defs/z"}}}, "z": {"tag": "Z"}}}

    def inner(reuse: bool) -> str:
        root = {"first": {"$ref": "#/defs/local"}, "second": {"$ref": "http://h/a.json#/defs/x"},
                "defs": {"local": {"tag": "LOCAL"}}}
        # replace_refs(proxies=False) is these two steps (jsonref.py:325-337)
        tree = jsonref.replace_refs(root, base_uri="http://h/root.json", proxies=True,
                                    loader=lambda uri: {"defs": dict(remote["defs"])})
        kept = seed_pools(lambda: object.__new__(jsonref.JsonRef))
        box = [tree["first"]]       # the walk replaces it in the tree; the box holds it last
        alive = box[0] if not reuse else None
        with quiet_allocator(), born_on_death_of(jsonref.JsonRef, box):
            jsonref._walk_refs(tree, lambda ref: ref.__subject__, replace=True)
        del alive, kept
        return tree["second"]["properties"]["inner"]["tag"]

    assert inner(reuse=True) == "LOCAL"   # released: the dead reference's target
    assert inner(reuse=False) == "Z"      # control


def test_bravado_core_unmarshals_with_a_dead_ref_schemas_method():
    """bravado_core/util.py:95-130 memoize_by_id keys _get_unmarshaling_method by id() of the
    schema dict, and the method for a {"$ref": ...} schema holds the target, not the dict
    (unmarshal.py:149-160): a ref dict born on a dead one's address is unmarshalled as the dead
    ref's model."""
    spec_module = PINS.need("bravado-core", "bravado_core.spec")
    from bravado_core.unmarshal import unmarshal_schema_object

    spec = spec_module.Spec.from_dict(
        {"swagger": "2.0", "info": {"title": "t", "version": "1"}, "paths": {},
         "definitions": {
             "Pet": {"type": "object", "properties": {"name": {"type": "string"}}},
             "Order": {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}},
         }},
        config={"use_models": False, "validate_responses": False})

    def when(reuse: bool):
        kept = seed_pools(lambda: {"$ref": ""})
        box = [{"$ref": "#/definitions/Pet"}]
        unmarshal_schema_object(spec, box[0], {"name": "rex"})
        alive = box[0] if not reuse else None
        later = (reborn(box, lambda: {"$ref": "#/definitions/Order"}) if reuse
                 else {"$ref": "#/definitions/Order"})
        result = unmarshal_schema_object(spec, later, {"when": "2020-01-02"})["when"]
        del alive, kept
        return result

    assert when(reuse=True) == "2020-01-02"                  # released: Pet's method, no date
    assert when(reuse=False) == datetime.date(2020, 1, 2)    # control


def test_onnxsim_reads_a_dead_models_inferred_shapes():
    """onnxsim/webgpu_tinygrad_codegen.py:303-322 keeps the newest model's inferred copy under
    id(model): a model born on the dead model's address gets the dead model's shapes."""
    codegen = PINS.need("onnxsim", "onnxsim.webgpu_tinygrad_codegen")
    import onnx
    from onnx import TensorProto, helper

    def relu_model(shape: list) -> onnx.ModelProto:
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        return helper.make_model(graph)

    def shape(reuse: bool) -> tuple:
        first_model, second_model = relu_model([1, 3]), relu_model([2, 5])
        kept = seed_pools(onnx.ModelProto)
        box = [onnx.ModelProto()]
        box[0].CopyFrom(first_model)
        assert codegen._static_shape(box[0], "y") == (1, 3)
        alive = box[0] if not reuse else None
        later = reborn(box, onnx.ModelProto) if reuse else onnx.ModelProto()
        later.CopyFrom(second_model)
        result = codegen._static_shape(later, "y")
        del alive, kept
        return result

    assert shape(reuse=True) == (1, 3)    # released: the dead model's shape
    assert shape(reuse=False) == (2, 5)   # control


def test_perscache_gives_a_new_instance_a_dead_instances_result(tmp_path, monkeypatch):
    """perscache/cache.py:239-292 keys a method call by str(id(self)) (per_instance, the default)
    and the other arguments, and writes the result to storage: an instance born on a dead
    instance's address gets the dead instance's result. Its debug records carry the call's
    arguments (the cache miss's record, its traceback): with pytest's log capture keeping them,
    the instance would not die, so the test turns the perscache logger off, as an application
    that does not log at DEBUG has it."""
    perscache = PINS.need("perscache", "perscache")
    from perscache.storage import LocalFileStorage

    monkeypatch.setattr(logging.getLogger("perscache"), "disabled", True)

    def compute(reuse: bool, directory) -> int:
        cache = perscache.Cache(storage=LocalFileStorage(directory))

        class Model:
            def __init__(self, scale: int):
                self.scale = scale

            @cache
            def compute(self, x: int) -> int:
                return self.scale * x

        first, result = _answers(lambda model: model.compute(10), lambda: Model(1),
                                 lambda: Model(7), lambda: object.__new__(Model), reuse)
        assert first == 10
        return result

    assert compute(reuse=True, directory=tmp_path / "reuse") == 10      # released: dead result
    assert compute(reuse=False, directory=tmp_path / "control") == 70   # control


def test_doorget_keys_new_data_as_a_dead_results_call():
    """doorget/cache.py:22-43, :75-84 keeps __REFS_CACHE__[id(result)] -> the producing call's
    key and substitutes it for any argument with that id; with StorageMode.Identity the result
    is not kept: a list born on a dead result's address is keyed as that result, and the
    downstream memoized function answers for the dead data."""
    doorget = PINS.need("doorget", "doorget")

    def total_of_new_data(reuse: bool) -> int:
        @doorget.cache(mode=doorget.StorageMode.Identity)
        def doubled(xs):
            return [x * 2 for x in xs]

        @doorget.cache
        def total(xs):
            return sum(xs)

        first, result = _answers(total, lambda: doubled([1, 2]), lambda: [100, 200],
                                 lambda: [0, 0], reuse)
        assert first == 6
        return result

    assert total_of_new_data(reuse=True) == 6      # released: the dead result's total
    assert total_of_new_data(reuse=False) == 300   # control
