"""Stand-ins for the two ONNX modules TE 1.x imports and torch >= 2.11 no longer has.

``import transformer_engine.pytorch`` of TE 1.12 and 1.13 runs ``from torch.onnx import
_type_utils`` (``softmax.py``, ``te_onnx_extensions.py``) and ``from torch.onnx._internal import
jit_utils`` (``te_onnx_extensions.py``); torch 2.11 removed both modules, so the import fails
before any training code is reached. TE uses them only to export to ONNX: ``_type_utils.JitScalarType``
inside its symbolic functions, and ``jit_utils.GraphContext`` as the annotation of three of them
(evaluated when the module is imported). Read at tags v1.12 and v1.13.

:func:`install` puts a minimal module under each of those two names in ``sys.modules``, and
only where the real one does not import; ``jit_utils`` carries an empty ``GraphContext`` class for
the annotations. Nothing that training uses is replaced: any other attribute of a stand-in
raises, saying ONNX export is not available, so an export that reaches one fails loudly.
The TE 1.x stack calls :func:`install` when it is loaded, before TE is imported; every report
of a TE stack says which stand-ins were in place (:func:`installed`, through
:func:`harness.stacks.te_common.release.run_info`).
"""

from __future__ import annotations

import importlib
import sys
import types

NAMES = ("torch.onnx._type_utils", "torch.onnx._internal.jit_utils")
MARKER = "__harness_standin__"


class GraphContext:
    """Stand-in for ``torch.onnx._internal.jit_utils.GraphContext``: only an annotation in TE 1.x."""


def _missing(module_name: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(f"{module_name}.{name}: this torch has no {module_name}; the harness put a stand-in "
                           f"there so that TE 1.x imports, and ONNX export is not available with it")
    return __getattr__


def _standin(name: str) -> types.ModuleType:
    module = types.ModuleType(name, f"Stand-in for {name} (removed from torch); see {__name__}.")
    setattr(module, MARKER, True)
    module.__getattr__ = _missing(name)
    if name.endswith("jit_utils"):
        module.GraphContext = GraphContext
    return module


def _importable(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def install(names=NAMES) -> tuple[str, ...]:
    """Put a stand-in under each of ``names`` whose real module does not import; returns the
    names now served by stand-ins (idempotent). ``names``: :data:`NAMES` but in tests."""
    for name in names:
        if not _importable(name):
            sys.modules[name] = _standin(name)
    return installed(names)


def installed(names=NAMES) -> tuple[str, ...]:
    """The names of ``names`` that stand-ins serve in this process."""
    return tuple(name for name in names if getattr(sys.modules.get(name), MARKER, False))


def uninstall(names=NAMES) -> None:
    """Remove the stand-ins (tests that check installing them)."""
    for name in installed(names):
        del sys.modules[name]
