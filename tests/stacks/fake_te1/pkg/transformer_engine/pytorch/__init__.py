"""CPU stand-in of transformer_engine.pytorch (TE 1.x): imports what TE 1.x imports from torch.onnx."""

from torch.onnx import _type_utils  # noqa: F401  (TE 1.x's softmax.py does; torch >= 2.11 lacks it)
from torch.onnx._internal import jit_utils  # noqa: F401  (te_onnx_extensions.py does)

from transformer_engine.common import is_package_installed
from transformer_engine.pytorch.fp8 import fp8_autocast, fp8_model_init  # noqa: F401
from transformer_engine.pytorch.module import Linear  # noqa: F401


def _annotated(g: jit_utils.GraphContext):      # TE evaluates such annotations at import
    return g


# TE 1.x checks its packages as it loads its extension (``_load_library``)
LOADED_WITH = is_package_installed("transformer-engine")
