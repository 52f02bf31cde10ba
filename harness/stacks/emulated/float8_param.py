"""The FP8 parameter type: FP8 bytes plus a private scale_inv taken at its own cast.

``quantize_`` is the high-precision -> FP8 in-place cast (optimizer steps, weight copies,
``reset_parameters``): it casts with the meta's current scale, records the amax in the meta's
``H[0]`` and keeps ``scale_inv = 1/scale`` privately, so a later change of the meta's scale
does not change what the stored bytes mean. The stack passes ``post_quantize_hooks`` that run
after every such cast (none in the patched stack).
"""

from __future__ import annotations

import torch

from harness.idreuse import reuse_alloc
from harness.stacks.emulated.kernels import cast_and_amax

class Float8Param:
    def __init__(self, hp_init: torch.Tensor, meta, slot: int, post_quantize_hooks=()):
        self.post_quantize_hooks = tuple(post_quantize_hooks)
        self.meta = meta
        self.slot = slot
        self.shape = tuple(hp_init.shape)
        # The harness may hand a dead object's address to _data here.
        self._data = reuse_alloc(lambda: torch.empty(self.shape, dtype=torch.uint8), "fp8_param_data")
        # The construction cast uses a dummy amax: it never enters the history.
        data, _dummy_amax = cast_and_amax(hp_init, meta.scale[slot], meta.dtype)
        self._data.copy_(data)
        self._scale_inv = meta.scale_inv[slot].clone()

    def quantize_(self, hp: torch.Tensor) -> None:
        data, amax = cast_and_amax(hp, self.meta.scale[self.slot], self.meta.dtype)
        self._data.copy_(data)
        self.meta.record_amax(self.slot, amax)
        self._scale_inv = self.meta.scale_inv[self.slot].clone()
        for hook in self.post_quantize_hooks:
            hook(self)

    def dequantize(self) -> torch.Tensor:
        return self._data.view(self.meta.dtype).float() * self._scale_inv
