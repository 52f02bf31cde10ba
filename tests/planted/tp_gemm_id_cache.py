"""The patched emulated stack plus a cache of dequantized weights read only by the TP GEMM.

The tensor-parallel layer's ``_weight_hp`` (the weight its GEMMs multiply by) is memoised on
``(id(weight._data), weight._data._version)``: an in-place cast bumps the version, so within
one model the cache is always right. Its table is a ``functools.lru_cache`` (it lives in C, no
scan sees it). A weight born at a dead weight's address, after as many in-place writes as the
dead one had at its construction, gets the dead weight's values in every GEMM; the cast state
the harness snapshots stays right. Only the tensor-parallel (Userbuffers) layer reads it.

    ./scripts/run --sut tests.planted.tp_gemm_id_cache:STACK --cases userbuffers

Its tests: ``tests/test_tp_forced_reuse.py``.
"""

from __future__ import annotations

import functools
from harness.stacks.emulated.stack import EmulatedStack


@functools.lru_cache(maxsize=None)
def _cached(key: tuple) -> list:
    return []


def _memoised_weight_hp(layer, original):
    def weight_hp():
        data = layer.weight._data
        cell = _cached((id(data), data._version))
        if not cell:
            cell.append(original())
        else:
            original()                      # keeps last_casts as the layer sets it
        return cell[0]
    return weight_hp


class TpGemmIdCacheStack(EmulatedStack):
    def __init__(self):
        super().__init__(buggy=False)
        self.name = "planted-tp-gemm-id-cache"

    def build(self, spec, ctx):
        model = super().build(spec, ctx)
        layer = model.layers[0]
        if spec.userbuffers and spec.fp8_params:
            layer._weight_hp = _memoised_weight_hp(layer, layer._weight_hp)
        return model

    def reset(self) -> None:
        super().reset()
        _cached.cache_clear()


STACK = TpGemmIdCacheStack()
