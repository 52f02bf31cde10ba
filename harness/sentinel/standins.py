"""``--te1-onnx-standins``: the ONNX stand-ins of the TE 1.x stack in a plain pytest session.

TE 1.12 and 1.13 import two ``torch.onnx`` modules that torch >= 2.11 removed
(:mod:`harness.stacks.te1.onnx_standins`). With this option (or ``te1_onnx_standins = true`` in
the ini file) the stand-ins are put in place before any conftest is loaded, so TE's own tests
import TE on new torch without a hand-written conftest. Where torch still has the real modules,
nothing is replaced. TE already imported by then (by an earlier plugin) is a usage error: the
stand-ins would come too late.
"""

from __future__ import annotations

import sys

import pytest

OPTION = "te1_onnx_standins"
TE_MODULE = "transformer_engine"


def wanted(config: pytest.Config) -> bool:
    return bool(config.known_args_namespace.te1_onnx_standins or config.getini(OPTION))


def install(config: pytest.Config) -> list[str]:
    """Install the stand-ins; the header lines that say which are in place."""
    if TE_MODULE in sys.modules:
        raise pytest.UsageError(
            f"--te1-onnx-standins: {TE_MODULE} was imported before the stand-ins could be installed "
            f"(by a plugin loaded earlier); load harness.sentinel first"
        )
    from harness.stacks.te1 import onnx_standins

    served = onnx_standins.install()
    if served:
        return [f"te1 onnx stand-ins: {', '.join(served)} (this torch has no such modules)"]
    return ["te1 onnx stand-ins: none needed (this torch has the real modules)"]
