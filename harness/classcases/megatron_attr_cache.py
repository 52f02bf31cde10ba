"""megatron-core 0.16.1, ``megatron/core/transformer/utils.py``: two module-level caches keyed
by ``id(model)`` and never pruned.

* ``_sequence_parallel_attr_cache`` (filled by ``_init_sequence_parallel_cache``, read by
  ``set_model_to_sequence_parallel``): the submodules whose sequence-parallel attributes
  ``set_model_to_sequence_parallel(model, set_to)`` flips;
* ``cuda_graph_attr_cache`` (``init_cuda_graph_cache`` / ``toggle_cuda_graphs``): the
  submodules whose ``cuda_graph_impl`` ``toggle_cuda_graphs(model, set_to)`` sets.

The caches hold the submodules but not the model, so the model can die. A new model born at
its address is found in the cache, and the call flips the dead model's submodules instead of
the new model's: the new model keeps its old settings. :func:`run` makes that happen with two
small ``torch.nn.Module`` models of the shape these functions walk (a ``config``, a
``position_embedding_type``, a submodule carrying the attribute); the fixed form pops each
cache entry when its model dies. The caches are saved and restored around every run.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import types
import weakref

from harness.classcases.realbug import Form, Outcome
from harness.idreuse.landing import born_on_death_of, seed_pools
from harness.idreuse.morgue import quiet_allocator
from harness.oracles.hygiene import stale_ids


class Cache(enum.Enum):
    """Which of the two caches a run exercises: (module global, init function, attribute)."""

    SEQUENCE_PARALLEL = ("_sequence_parallel_attr_cache", "_init_sequence_parallel_cache", "sequence_parallel")
    CUDA_GRAPHS = ("cuda_graph_attr_cache", "init_cuda_graph_cache", "cuda_graph_impl")

    def __init__(self, registry: str, init: str, attribute: str):
        self.registry = registry
        self.init = init
        self.attribute = attribute


def _model_class():
    import torch

    class Block(torch.nn.Module):
        """A layer with the flags the two functions set."""

        def __init__(self):
            super().__init__()
            self.sequence_parallel = False
            self.cuda_graph_impl = False     # a bool: init_cuda_graph_cache only caches bools

    class Model(torch.nn.Module):
        """The top-level model: no flag of its own, so the caches do not keep it alive."""

        def __init__(self, name: str):
            super().__init__()
            self.config = types.SimpleNamespace(name=name, sequence_parallel=False, recompute_granularity=None)
            self.position_embedding_type = "rope"
            self.block = Block()

    return Model


def _utils():
    from megatron.core.transformer import utils

    return utils


@contextlib.contextmanager
def saved_caches():
    """Each run starts from empty caches and leaves them as it found them."""
    utils = _utils()
    saved = {cache.registry: getattr(utils, cache.registry) for cache in Cache}
    for name in saved:
        setattr(utils, name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(utils, name, value)


@contextlib.contextmanager
def pruned_caches():
    """The fixed form: a model's entry is popped from the cache when the model dies."""
    utils = _utils()
    released = {cache: getattr(utils, cache.init) for cache in Cache}

    def pruning(cache):
        def init(model, *args, **kwargs):
            current = getattr(utils, cache.registry)
            fresh = current is None or id(model) not in current
            released[cache](model, *args, **kwargs)
            if fresh:
                weakref.finalize(model, functools.partial(_pop, cache.registry, id(model)))
        return init

    for cache in Cache:
        setattr(utils, cache.init, pruning(cache))
    try:
        yield
    finally:
        for cache, function in released.items():
            setattr(utils, cache.init, function)


def _pop(registry: str, key: int) -> None:
    current = getattr(_utils(), registry)
    if current is not None:
        current.pop(key, None)


def _flip(cache: Cache, model) -> None:
    utils = _utils()
    if cache is Cache.SEQUENCE_PARALLEL:
        utils.set_model_to_sequence_parallel(model, set_to=True)
    else:
        utils.toggle_cuda_graphs(model, set_to="local", reset_cuda_graphs=False)


def run(form: Form, cache: Cache = Cache.SEQUENCE_PARALLEL, reuse: bool = True) -> Outcome:
    """One reproduction: the new model's flag after the call that should set it.
    ``reuse=False`` is the control: the old model stays alive, so no address comes back."""
    Model = _model_class()
    utils = _utils()
    truth = True if cache is Cache.SEQUENCE_PARALLEL else "local"
    fix = pruned_caches() if form is Form.FIXED else contextlib.nullcontext()
    with saved_caches(), fix:
        with quiet_allocator():
            kept = seed_pools(lambda: object.__new__(Model))
            box = [Model("old")]
            _flip(cache, box[0])
            if reuse:
                with born_on_death_of(Model, box) as landing:
                    new = Model("new")
                landing.require()
                dead = {landing.address: "model 'old'"}
            else:
                new, dead = Model("new"), {}
            stale = stale_ids({cache.registry: getattr(utils, cache.registry)}, dead)
        _flip(cache, new)
        answer = getattr(new.block, cache.attribute)
        del kept, box
    return Outcome(answer, truth, reuse and landing.born is new, tuple(stale))
