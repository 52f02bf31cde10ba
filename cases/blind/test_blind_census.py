"""The true hazards of the blind census (docs/log/2026-12-06-scan-blind-census.md), reproduced.

Each test drives a registry keyed by ``id()`` in a released third-party package: it records an
entry for an object, frees that object and, with the harness's forced reuse
(:func:`harness.idreuse.landing.land`), makes a new object on the dead one's address. The
released code then answers for the dead object: the test asserts the wrong answer, and, as the
control, the right answer when the first object is kept alive (so no address comes back).

Each package is pinned to the release the census read; a test is skipped, naming the package
and the version, when that release is not installed:

    pip install --no-deps transformers==5.25.0 bitsandbytes==0.50.2 pyro-ppl==1.9.2 \
        nemo_toolkit==3.0.0 sglang==0.5.23
    # then the pure-Python modules their imports ask for (the log lists them)
    ./scripts/test cases/blind/test_blind_census.py -q

Where the registry's key is an object the library makes deep inside a server (a batch, a
tokenizer, a K/V cache), the test hands the released function a small stand-in object of the
kind it reads; the function itself is the released one, unchanged.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from cases.blind.pinned import Pins, reborn
from harness.idreuse.landing import seed_pools

PINS = Pins("transformers==5.25.0", "bitsandbytes==0.50.2", "pyro-ppl==1.9.2",
            "nemo_toolkit==3.0.0", "sglang==0.5.23")
_need = PINS.need
_reborn = reborn


def test_transformers_download_aggregator_drops_a_finished_shard():
    """cli/serving/utils.py:400 keys DownloadAggregator.bars by id(bar) and keeps a closed
    bar's entry "so totals remain correct"; the next shard's bar born on its address
    overwrites it, and the aggregate loses the finished shard's bytes."""
    utils = _need("transformers", "transformers.cli.serving.utils")

    def aggregate(reuse: bool) -> int:
        events: list = []
        bar_class = utils.make_progress_tqdm_class(events.append, "model")
        kept = seed_pools(lambda: bar_class(total=0, unit="it"))
        box = [bar_class(total=100, unit="B")]
        box[0].update(100)
        box[0].close()
        if reuse:
            second = _reborn(box, lambda: bar_class(total=100, unit="B"))
        else:
            second = bar_class(total=100, unit="B")
        del kept, second, box
        return events[-1]["progress"]["current"]

    assert aggregate(reuse=True) == 0        # released: the first shard's 100 bytes are gone
    assert aggregate(reuse=False) == 100     # control: first bar alive, its bytes counted


def test_bitsandbytes_override_moves_to_a_new_parameter():
    """optim/optimizer.py:108-111 keeps per-parameter overrides in the process-wide
    GlobalOptimManager.pid2config by id(p); get_config (:363) finds them for any parameter
    born on an overridden parameter's address, e.g. in the next model of a sweep."""
    bnb = _need("bitsandbytes", "bitsandbytes")
    import torch

    manager = bnb.optim.GlobalOptimManager.get_instance()

    def optim_bits(p) -> int:
        optimizer = bnb.optim.Adam([p], lr=1e-3, optim_bits=8)
        return optimizer.get_config(0, 0, optimizer.param_groups[0])["optim_bits"]

    def run(reuse: bool) -> int:
        data = torch.zeros(4)
        kept = seed_pools(lambda: torch.nn.Parameter(data))
        box = [torch.nn.Parameter(data)]
        first = id(box[0])
        manager.override_config(box[0], "optim_bits", 32)     # the first model's embedding
        try:
            if reuse:
                second = _reborn(box, lambda: torch.nn.Parameter(data))
            else:
                second = torch.nn.Parameter(data)
            return optim_bits(second)
        finally:
            manager.pid2config.pop(first, None)
            del kept

    assert run(reuse=True) == 32     # released: the new parameter gets the dead one's 32-bit states
    assert run(reuse=False) == 8     # control: the optimizer's own setting


def test_pyro_categorical_support_stamp_matches_a_new_distribution():
    """distributions/torch.py:148 stamps enumerate_support's tensor with id(self) and :128
    takes the reshape fast path for any Categorical with that id: a new Categorical of
    another size born on the address rejects a support tensor the slow path scores."""
    _need("pyro-ppl", "pyro")
    import torch
    from pyro.distributions import Categorical

    def score(reuse: bool):
        kept = seed_pools(lambda: object.__new__(Categorical))
        box = [Categorical(logits=torch.zeros(3))]
        support = box[0].enumerate_support(expand=False)
        if reuse:
            second = _reborn(box, lambda: Categorical(logits=torch.zeros(4)))
        else:
            second = Categorical(logits=torch.zeros(4))
        del kept
        return second.log_prob(support)

    with pytest.raises(AssertionError):
        score(reuse=True)                # released: the dead distribution's fast path
    expected = torch.distributions.Categorical(logits=torch.zeros(4)).log_prob(torch.arange(3))
    assert torch.allclose(score(reuse=False), expected)


class _SubMesh:
    """The calls broadcasting.py makes on ``device_mesh[axis]``."""

    def __init__(self, row):
        import torch

        self.mesh = torch.tensor(row)

    def size(self) -> int:
        return int(self.mesh.numel())

    def get_group(self):
        return ("group", tuple(self.mesh.tolist()))


class _Mesh:
    """A 2 x 2 ("dp", "cp") device mesh as seen from rank 0: its "cp" row is the first row."""

    mesh_dim_names = ("dp", "cp")

    def __init__(self, layout):
        self.layout = layout

    def __getitem__(self, axis):
        return _SubMesh(self.layout[0])


def test_nemo_group_cache_hands_a_new_mesh_the_dead_meshes_source():
    """collections/common/data/lhotse/broadcasting.py:221 caches (group, source rank) in the
    module-level _GROUP_CACHE by (id(device_mesh), axes): a mesh born on a dead mesh's address
    with another layout gets the dead mesh's group and broadcast source."""
    nemo = _need("nemo_toolkit", "nemo")
    path = pathlib.Path(nemo.__file__).parent / "collections/common/data/lhotse/broadcasting.py"
    spec = importlib.util.spec_from_file_location("nemo_lhotse_broadcasting", path)
    broadcasting = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(broadcasting)

    def source(reuse: bool) -> int:
        broadcasting._GROUP_CACHE.clear()
        kept = seed_pools(lambda: object.__new__(_Mesh))
        box = [_Mesh([[0, 1], [2, 3]])]
        broadcasting._resolve_group_and_source(box[0], ("cp",))
        second_layout = [[1, 0], [3, 2]]          # rank 0's "cp" group now starts at rank 1
        if reuse:
            second = _reborn(box, lambda: _Mesh(second_layout))
        else:
            second = _Mesh(second_layout)
        del kept
        return broadcasting._resolve_group_and_source(second, ("cp",))[1]

    assert source(reuse=True) == 0     # released: the dead mesh's source rank
    assert source(reuse=False) == 1    # control


class _Batch:
    """The two fields the eager DP-padding check reads of a ForwardBatch."""

    def __init__(self, batch_size: int, original: int):
        self.batch_size = batch_size
        self._original_batch_size = original


class _Backend:
    def __init__(self):
        self._dp_rebuilt_batch_id = None
        self.forward_metadata = None
        self.rebuilt = 0

    def init_forward_metadata(self, forward_batch) -> None:
        self.rebuilt += 1


def test_sglang_dots_backend_skips_the_rebuild_of_a_new_batch():
    """srt/layers/attention/dots_hybrid_backend.py:115/123 remembers the last rebuilt batch
    by id(forward_batch): the next step's DP-padded batch, born on its address, keeps the
    stale metadata."""
    dots = _need("sglang", "sglang.srt.layers.attention.dots_hybrid_backend")

    def rebuilds(reuse: bool) -> int:
        backend = _Backend()
        kept = seed_pools(lambda: object.__new__(_Batch))
        box = [_Batch(8, 7)]
        dots._maybe_rebuild_dots_metadata(backend, box[0])
        second = _reborn(box, lambda: _Batch(12, 10)) if reuse else _Batch(12, 10)
        dots._maybe_rebuild_dots_metadata(backend, second)
        del kept
        return backend.rebuilt

    assert rebuilds(reuse=True) == 1     # released: the second padded batch is not rebuilt
    assert rebuilds(reuse=False) == 2    # control


class _Tokenizer:
    def __init__(self, byte_level: bool):
        self.is_byte_level = byte_level


def test_sglang_byte_level_set_takes_a_new_tokenizer_for_byte_level():
    """srt/entrypoints/openai/utils.py:60/68 adds id(tokenizer) to the module-level
    _BYTE_LEVEL_TOKENIZERS: a SentencePiece tokenizer born on a byte-level one's address is
    taken for byte-level, and token_id_to_bytes decodes its pieces with the GPT-2 table."""
    utils = _need("sglang", "sglang.srt.entrypoints.openai.utils")

    def byte_level(reuse: bool) -> bool:
        kept = seed_pools(lambda: object.__new__(_Tokenizer))
        box = [_Tokenizer(True)]
        utils._is_byte_level_tokenizer(box[0])
        second = _reborn(box, lambda: _Tokenizer(False)) if reuse else _Tokenizer(False)
        answer = utils._is_byte_level_tokenizer(second)
        utils._BYTE_LEVEL_TOKENIZERS.clear()
        del kept
        return answer

    assert byte_level(reuse=True) is True     # released
    assert byte_level(reuse=False) is False   # control


def test_sglang_varlen_mask_meta_returns_a_dead_masks_metadata():
    """multimodal_gen/runtime/layers/attention/layer.py:323 keys DynamicVarlenMaskMeta's
    one-entry cache by ("capture", id(attn_mask), shape) outside graph replay; the ideogram
    padder keeps one on the model: a new mask of the same shape on a dead mask's address gets
    the dead mask's cu_seqlens."""
    layer = _need("sglang", "sglang.multimodal_gen.runtime.layers.attention.layer")
    import torch

    def mask(valid: int):
        m = torch.zeros(2, 16, dtype=torch.bool)
        m[:, :valid] = True
        return m

    def cu_seqlens(reuse: bool):
        meta = layer.DynamicVarlenMaskMeta()
        kept = seed_pools(lambda: torch.zeros(1))
        box = [mask(4)]
        meta.resolve(box[0])
        second = _reborn(box, lambda: mask(9)) if reuse else mask(9)
        del kept
        return meta.resolve(second)["cu_seqlens"].tolist()

    assert cu_seqlens(reuse=True) == [0, 4, 8]      # released: the dead mask's lengths
    assert cu_seqlens(reuse=False) == [0, 9, 18]    # control


def test_sglang_vla_graph_keeps_the_last_requests_prefix():
    """multimodal_gen/runtime/vla/cuda_graph.py:363/374 skips copying a request's prefix K/V
    into the graph's static buffers when id(prefix_context.past_key_values) equals the last
    one copied: the next request's cache, born on its address, replays with the old K/V."""
    cuda_graph = _need("sglang", "sglang.multimodal_gen.runtime.vla.cuda_graph")
    from sglang.multimodal_gen.runtime.vla.prefix_cache import PrefixContext, VLADensePrefixCache
    import torch

    def cache(value: float):
        kv = torch.full((1, 2, 4, 8), value)
        return VLADensePrefixCache([(kv, kv.clone(), None)])

    def context(kv):
        return PrefixContext(past_key_values=kv, prefix_pad_masks=torch.ones(1, 4, dtype=torch.bool),
                             prefix_len=4)

    def replayed(reuse: bool) -> float:
        runner = cuda_graph.VLADenoiseGraphRunner(enabled=False)
        kept = seed_pools(lambda: object.__new__(VLADensePrefixCache))
        box = [cache(1.0)]
        captured = cuda_graph._CapturedDenoiseGraph(
            graph=None, static_prefix_context=cuda_graph._clone_prefix_context(context(box[0])),
            static_x_t=None, static_timestep=None, static_output=None,
            current_context_id=id(box[0]), current_context_digest=None)
        second = _reborn(box, lambda: cache(2.0)) if reuse else cache(2.0)
        runner._sync_context_if_needed(captured, context(second))
        del kept
        return float(captured.static_prefix_context.past_key_values[0][0][0, 0, 0, 0])

    assert replayed(reuse=True) == 1.0     # released: the last request's prefix K/V
    assert replayed(reuse=False) == 2.0    # control
