"""Which Transformer Engine release is installed, read without importing it, for both TE stacks.

``--sut te`` runs TE 2.x and ``--sut te1`` TE 1.x; each refuses the other line in one line
(:func:`line_refusal`). Every report of either stack names the release that ran and whether
the ONNX stand-ins of :mod:`harness.stacks.te1.onnx_standins` were in place (:func:`run_info`,
which :func:`harness.stacks.run_info` calls for the runner). The version comes from the
installed distribution's metadata (``transformer-engine``, the pure-Python wheel every install
has), so asking costs no import of TE and no CUDA.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

DISTRIBUTIONS = ("transformer-engine", "transformer_engine", "transformer-engine-torch")
STANDINS_MODULE = "harness.stacks.te1.onnx_standins"
PACKAGE_CHECK_MODULE = "harness.stacks.te1.package_check"


def found() -> bool:
    """Whether a ``transformer_engine`` package can be imported here (located, not imported)."""
    try:
        return importlib.util.find_spec("transformer_engine") is not None
    except (ImportError, ValueError):
        return False


def installed_version() -> str | None:
    """The installed TE version (``"1.12.0"``), or None when no TE distribution is installed."""
    for name in DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def major(version: str | None) -> int | None:
    """The major release of a version string, or None when it has none."""
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def line_refusal(sut: str, wanted_major: int, other: str, version: str | None) -> str | None:
    """Why ``--sut {sut}`` cannot run the installed TE (one line), or None: it runs TE
    ``{wanted_major}.x`` only, and ``--sut {other}`` runs the other line."""
    found = major(version)
    if version is None or found is None or found == wanted_major:
        return None
    return (f"--sut {sut} runs Transformer Engine {wanted_major}.x and this is TE {version}: "
            f"use --sut {other}")


def run_info() -> dict:
    """What a report says about the TE that ran: its version, the ONNX stand-ins in place and
    whether TE 1.x's package checks were answered from metadata (read from this process, where
    the stack was loaded)."""
    standins = sys.modules.get(STANDINS_MODULE)
    installed = list(standins.installed()) if standins is not None else []
    info = {"te_version": installed_version(), "onnx_standins": installed}
    check = sys.modules.get(PACKAGE_CHECK_MODULE)
    if check is not None:
        info["package_check_from_metadata"] = check.in_place()
    return info
