"""Stacks under test: the protocol, the built-in stacks by name, and loading by import path."""

from __future__ import annotations

import importlib
import inspect

from harness.errors import SetupError, UsageError
from harness.stacks.capabilities import capabilities_of

BUILTIN = {
    "emulated-patched": "harness.stacks.emulated.stack:PATCHED",
    "emulated-buggy": "harness.stacks.emulated.stack:BUGGY",
    "te": "harness.stacks.te.stack:load",
    "te-buggy": "harness.stacks.te.stack:load_buggy",
    "te1": "harness.stacks.te1.stack:load",
    "torchao": "harness.stacks.torchao.stack:load",
}


# Stacks whose reports say which release of the library ran (harness.stacks.te.release).
_TE_STACKS = ("te", "te-buggy", "te1")


def run_info(name: str, world_size: int | None = None) -> dict:
    """What a run's report says about the stack beyond its name: for the TE stacks, the TE
    version and the ONNX stand-ins in place (read in this process, after the stack was loaded),
    and how ``world_size`` ranks sit on this host's GPUs and what TE reduces over; empty for the
    others. Called by the runner when the session is open."""
    if name not in _TE_STACKS:
        return {}
    from harness.stacks.te.gpus import host_placement
    from harness.stacks.te.release import run_info as te_run_info

    info = te_run_info()
    placed = host_placement(world_size) if world_size is not None else None
    if placed is not None:
        info["placement"] = placed.to_dict()
    return info


def _flags(keys) -> str:
    return ", ".join("--" + key.replace("_", "-") for key in keys)


def _check_accepts(factory, options: dict, name: str) -> None:
    """UsageError unless ``factory`` takes every one of ``options`` as a keyword."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return                                   # no signature to read: let the call decide
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = [key for key in options if key not in names]
    if unknown:
        raise UsageError(f"--sut {name!r} takes no {_flags(unknown)}")


def load_stack(name: str, options: dict | None = None):
    """A stack by built-in name or ``package.module:attr`` (an object, or a factory to call).

    ``options`` (e.g. ``{"inject": "id-hook"}``) go to factories that accept them.
    """
    target = BUILTIN.get(name, name)
    if ":" not in target:
        raise UsageError(f"unknown stack {name!r}: use one of {', '.join(BUILTIN)} or package.module:attr")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except SetupError:
        raise
    except Exception as exc:
        raise UsageError(f"cannot import stack module {module_name!r} for --sut {name!r}: "
                         f"{type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"--sut {name!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if callable(obj) and not hasattr(obj, "build"):
        if options:
            _check_accepts(obj, options, name)
        obj = obj(**(options or {})) if options else obj()
    elif options:
        # A stack given as an object has no way to take them: refused, never silently dropped
        # (``--sut emulated-patched --inject id-hook`` would otherwise run the patched stack).
        raise UsageError(f"--sut {name!r} takes no {_flags(options)}: only a stack made by a factory that "
                         f"accepts it does (te, torchao)")
    missing = [m for m in ("name", "build", "forward_backward", "snapshot", "optimizer_step", "final_weights",
                           "reuse_targets", "destroy", "registries", "reset") if not hasattr(obj, m)]
    if missing:
        raise UsageError(f"--sut {name!r} is not a stack: it lacks {', '.join(missing)} "
                         f"(see harness/stacks/protocol.py)")
    capabilities_of(obj)      # a malformed declaration is refused here, before any case
    return obj
