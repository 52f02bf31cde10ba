"""Stacks under test: the protocol, the built-in stacks by name, and loading by import path."""

from __future__ import annotations

import importlib

from harness.errors import SetupError, UsageError
from harness.stacks.capabilities import capabilities_of

BUILTIN = {
    "emulated-patched": "harness.stacks.emulated.stack:PATCHED",
    "emulated-buggy": "harness.stacks.emulated.stack:BUGGY",
    "te": "harness.stacks.te.stack:load",
    "te-buggy": "harness.stacks.te.stack:load_buggy",
    "torchao": "harness.stacks.torchao.stack:load",
}


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
        obj = obj(**(options or {})) if options else obj()
    missing = [m for m in ("name", "build", "forward_backward", "snapshot", "optimizer_step", "final_weights",
                           "reuse_targets", "destroy", "registries", "reset") if not hasattr(obj, m)]
    if missing:
        raise UsageError(f"--sut {name!r} is not a stack: it lacks {', '.join(missing)} "
                         f"(see harness/stacks/protocol.py)")
    capabilities_of(obj)      # a malformed declaration is refused here, before any case
    return obj
