"""The hazards of the third blind census (docs/log/2026-12-07-scan-blind-census-3.md), reproduced.

Every true hazard the census found. Each test works as those of ``test_blind_census_2.py``
do: the released code, with the dead object's address given back by force, answers for the
dead object, and answers right when the first object is kept alive (the control).

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --no-deps torch_xla==2.9.0
    pip install dask==2026.11.0 pandas pyarrow "jax[cpu]==0.10.2" flax==0.12.8 \
        deepxde==1.15.0 comet_ml==3.58.8
    ./scripts/test cases/blind/test_blind_census_3.py -q

torch_xla is installed without its dependencies and its package is never imported (its
native extension wants a torch of its own release): the test loads the one released file
that holds the cache, with a stand-in for the ``scan`` it imports and never calls here.
"""

from __future__ import annotations

import gc
import importlib.util
import pickle
import sys
import types

import pytest

from cases.blind.pinned import Pins, reborn, require
from harness.idreuse.landing import seed_pools

PINS = Pins("torch_xla==2.9.0", "dask==2026.11.0", "flax==0.12.8", "jax==0.10.2",
            "deepxde==1.15.0", "comet_ml==3.58.8")


def _scan_layers(monkeypatch):
    """torch_xla/experimental/scan_layers.py of the pinned release, loaded on its own."""
    path = PINS.file("torch_xla", "experimental/scan_layers.py")
    for name in ("torch_xla", "torch_xla.experimental"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    stand_in = types.ModuleType("torch_xla.experimental.scan")
    stand_in.scan = None        # scan_layers() calls it; the cache under test is filled before
    monkeypatch.setitem(sys.modules, "torch_xla.experimental.scan", stand_in)
    spec = importlib.util.spec_from_file_location("torch_xla_scan_layers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_xla_scan_layers_runs_a_dead_models_layer(monkeypatch):
    """experimental/scan_layers.py:20 caches the function that runs every layer under
    (id(partition_fn), id(first_layer)) when is_layer_pure=True; the function holds a deepcopy
    of the first layer as its template, not the layer: a new model's first layer born on a dead
    one's address runs the dead layer's template (here its scale), with the new weights."""
    scan_layers = _scan_layers(monkeypatch)
    import torch
    from functorch.compile import default_partition

    class Block(torch.nn.Module):
        def __init__(self, scale: float):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.scale = scale

        def forward(self, x):
            return self.lin(x) * self.scale

    def output(reuse: bool) -> float:
        scan_layers._ONE_LAYER_CACHE.clear()
        kept = seed_pools(lambda: object.__new__(Block))
        box = [Block(scale=2.0)]
        scan_layers._create_or_get_cached_one_layer_fn(box[0], default_partition, True)
        second = reborn(box, lambda: Block(scale=3.0)) if reuse else Block(scale=3.0)
        run = scan_layers._create_or_get_cached_one_layer_fn(second, default_partition, True)
        with torch.no_grad():
            for p in second.parameters():
                p.fill_(1.0)
            params = dict(second.named_parameters())
            out, _ = run(torch.ones(1, 2), params)
        del kept
        return float(out[0, 0])

    assert output(reuse=True) == 6.0      # released: (1 + 1 + 1) * 2, the dead layer's scale
    assert output(reuse=False) == 9.0     # control: (1 + 1 + 1) * 3


def test_dask_parquet_fragment_is_sent_with_a_dead_filesystem(tmp_path):
    """dataframe/dask_expr/io/parquet.py:141-142 keeps the pickle of the last filesystem a
    FragmentWrapper packed, class-wide, under id(fs), without the filesystem: a fragment of
    a filesystem born on the dead one's address is packed (pickled for a worker) with the dead
    filesystem, and reads the dead filesystem's file."""
    require("dask", PINS.versions["dask"])
    pytest.importorskip("pyarrow", reason="dask's parquet reader needs pyarrow")
    parquet = PINS.need("dask", "dask.dataframe.dask_expr.io.parquet")
    import pyarrow as pa
    import pyarrow.dataset as pa_ds
    import pyarrow.fs as pa_fs
    import pyarrow.parquet as pq

    for name, value in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        pq.write_table(pa.table({"x": [value]}), tmp_path / name / "part.parquet")

    base = pa_fs.LocalFileSystem()      # one base: a new one per filesystem would take the block
    paths = {name: str(tmp_path / name) for name in ("a", "b")}

    def subtree(name: str):
        return pa_fs.SubTreeFileSystem(paths[name], base)

    def shipped(fs) -> list:
        fragment = next(iter(pa_ds.dataset("part.parquet", filesystem=fs).get_fragments()))
        wrapper = pickle.loads(pickle.dumps(parquet.FragmentWrapper(fragment, filesystem=fs)))
        return wrapper.fragment.to_table()["x"].to_pylist()

    def values(reuse: bool) -> list:
        parquet.FragmentWrapper._filesystem_pickle_cache = (-1, None)
        kept = seed_pools(lambda: subtree("a"))
        box = [subtree("a")]
        shipped(box[0])
        second = reborn(box, lambda: subtree("b")) if reuse else subtree("b")
        answer = shipped(second)
        del kept
        return answer

    assert values(reuse=True) == [1]     # released: the dead filesystem's file
    assert values(reuse=False) == [2]    # control


def test_flax_nn_jit_runs_a_dead_modules_function():
    """linen/transforms.py:439-466 gives nn.jit a static argument, _HashableProxy, equal to
    another when the hashes of the modules' fingerprints are equal; the fingerprint holds each
    field's value and a function hashes by its address, while the proxy keeps only a weak
    reference: a module whose function field is born on a dead one's address is equal to the
    dead module's proxy, and jax's jit cache runs the trace of the dead function."""
    PINS.need("jax", "jax")
    linen = PINS.need("flax", "flax.linen")
    import jax.numpy as jnp

    def output(reuse: bool) -> float:
        class Act(linen.Module):
            fn: object

            @linen.compact
            def __call__(self, x):
                return self.fn(x)

        jitted = linen.jit(Act)
        kept = seed_pools(lambda: (lambda x: x + 10.0))
        box = [lambda x: x * 2.0]
        jitted(fn=box[0]).apply({}, jnp.ones(()))
        gc.collect()                 # the bound clones of the first apply are cyclic garbage
        second = reborn(box, lambda: (lambda x: x + 10.0)) if reuse else (lambda x: x + 10.0)
        answer = float(jitted(fn=second).apply({}, jnp.ones(())))
        del kept
        return answer

    assert output(reuse=True) == 2.0      # released: 1 * 2, the dead function's trace
    assert output(reuse=False) == 11.0    # control: 1 + 10


def test_deepxde_boundary_values_of_dead_training_points(monkeypatch):
    """icbc/boundary_conditions.py:410-413 caches a boundary condition's values under
    (id(X), beg, end) for the pytorch backend, since "the ndarray is fixed"; the cached values
    do not hold X. PDEPointResampler(bc_points=True) rebuilds the training array: one born on
    the dead array's address is given the dead points' boundary values."""
    monkeypatch.setenv("DDE_BACKEND", "pytorch")
    conditions = PINS.need("deepxde", "deepxde.icbc.boundary_conditions")
    import numpy as np

    def values(reuse: bool) -> float:
        cached = conditions.npfunc_range_autocache(lambda x: x * 10.0)
        kept = seed_pools(lambda: np.empty(0))
        box = [np.zeros((4, 1))]
        cached(box[0], 0, 2, None)
        second = reborn(box, lambda: np.ones((4, 1))) if reuse else np.ones((4, 1))
        answer = float(np.sum(cached(second, 0, 2, None)))
        del kept
        return answer

    assert values(reuse=True) == 0.0      # released: the dead points' values
    assert values(reuse=False) == 20.0    # control: 10 * (1 + 1)


class _Experiment:
    """What comet_ml's PyTorch loss logging reads of an experiment, and the metrics it logs."""

    alive = True
    auto_metric_logging = True
    curr_step = 0

    def __init__(self):
        self._localstorage = types.SimpleNamespace()
        self.logged = []

    def _log_metric(self, name, value, framework=None):
        self.logged.append((name, value))


def test_comet_ml_logs_a_dead_steps_loss():
    """loggers/pytorch_logger.py:293 maps id(scaler.scale(loss)) to the unscaled loss, and only
    a backward called on that very tensor pops it (:219); the loss logged at a backward is
    looked up by id() of the tensor backward is called on (:128). With gradient accumulation,
    (scaler.scale(loss) / n).backward() leaves the scaled tensor's entry behind: a later
    step's tensor born on its address is logged with the dead step's loss."""
    logger = PINS.need("comet_ml", "comet_ml.loggers.pytorch_logger")
    import torch

    def backward(experiment, tensor):         # what the Tensor.backward hook does (:214-219)
        logger._log_loss_value(tensor, experiment)
        logger._clean_amp_loss_mapping(id(tensor), experiment)

    def logged(reuse: bool) -> list:
        experiment = _Experiment()
        kept = seed_pools(lambda: torch.empty(0))
        step_loss = torch.tensor(1.0)
        box = [step_loss * 1024.0]                       # scaler.scale(loss)
        logger.amp_scale_loss_hook(experiment, None, box[0], None, step_loss)
        backward(experiment, box[0] / 2)                 # accumulation: backward on a quotient
        # Made empty, then filled: made by torch.tensor(5.0), which also parses a Python float,
        # no new tensor got the dead one's block in 5 of 40 runs of this test alone.
        later = reborn(box, lambda: torch.empty(())) if reuse else torch.empty(())
        later.fill_(5.0)
        backward(experiment, later)
        del kept
        return [value for _, value in experiment.logged]

    assert logged(reuse=True) == [512.0, 1.0]     # released: the dead step's loss
    assert logged(reuse=False) == [512.0, 5.0]    # control
