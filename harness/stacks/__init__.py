"""Stacks under test: the protocol, the built-in stacks by name, and loading by import path."""

from __future__ import annotations

import importlib
import inspect

from harness.errors import HarnessError, UsageError
from harness.stacks.capabilities import capabilities_of
from harness.stacks.hooks import missing_members

BUILTIN = {
    "emulated-patched": "harness.stacks.emulated.stack:PATCHED",
    "emulated-buggy": "harness.stacks.emulated.stack:BUGGY",
    "te": "harness.stacks.te.stack:load",
    "te-buggy": "harness.stacks.te.stack:load_buggy",
    "te1": "harness.stacks.te1.stack:load",
    "torchao": "harness.stacks.torchao.stack:load",
}


# Stacks whose reports say which release of the library ran (harness.stacks.te_common.release).
_TE_STACKS = ("te", "te-buggy", "te1")


def run_info(name: str, world_size: int | None = None) -> dict:
    """What a run's report says about the stack beyond its name: for the TE stacks, the TE
    version and the ONNX stand-ins in place (read in this process, after the stack was loaded),
    and how ``world_size`` ranks sit on this host's GPUs and what TE reduces over; empty for the
    others. Called by the runner when the session is open."""
    if name not in _TE_STACKS:
        return {}
    from harness.stacks.te_common.gpus import host_placement
    from harness.stacks.te_common.release import run_info as te_run_info

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

    ``options`` (e.g. ``{"inject": "id-hook"}``) go to factories that accept them. Whatever is wrong
    with ``name`` (no such module, a syntax error in it, no such attribute, a factory that needs
    arguments or raises, something that is not a stack) is a :class:`UsageError`: one line, exit 2,
    before any rank starts.
    """
    target = BUILTIN.get(name, name)
    if ":" not in target:
        raise UsageError(f"unknown stack {name!r}: use one of {', '.join(BUILTIN)} or package.module:attr")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except HarnessError:
        raise
    except Exception as exc:
        raise UsageError(f"cannot import stack module {module_name!r} for --sut {name!r}: "
                         f"{_one_line(exc)}") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"--sut {name!r}: module {module_name!r} has no attribute {attr!r}") from None
    if callable(obj) and missing_members(obj, ("build",)):
        obj = _call_factory(obj, options or {}, name)
    elif options:
        # A stack given as an object has no way to take them: refused, never silently dropped
        # (``--sut emulated-patched --inject id-hook`` would otherwise run the patched stack).
        raise UsageError(f"--sut {name!r} takes no {_flags(options)}: only a stack made by a factory that "
                         f"accepts it does (te, torchao)")
    from harness.stacks.protocol import REQUIRED

    missing = missing_members(obj, REQUIRED)
    if missing:
        raise UsageError(f"--sut {name!r} is not a stack: its {type(obj).__name__} lacks "
                         f"{', '.join(missing)} (see harness/stacks/protocol.py)")
    capabilities_of(obj)      # a malformed declaration is refused here, before any case
    return obj


def _call_factory(factory, options: dict, name: str):
    """``factory(**options)``; a factory that needs arguments or raises is one line of UsageError."""
    if options:
        _check_accepts(factory, options, name)
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        params = ()
    needed = [p.name for p in params if p.default is p.empty and p.name not in options
              and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if needed:
        raise UsageError(f"--sut {name!r}: {getattr(factory, '__qualname__', factory)!s} needs arguments "
                         f"({', '.join(needed)}); give a stack object or a factory that takes none")
    try:
        return factory(**options)
    except HarnessError:
        raise                                    # the stack's own one line (no TE, no GPU, ...)
    except Exception as exc:
        raise UsageError(f"--sut {name!r}: making the stack raised {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, with where in the user's code it was raised."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and not isinstance(exc, SyntaxError) and not tb.tb_frame.f_code.co_filename.startswith("<"):
        import os

        text += f" (at {os.path.relpath(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})"
    return text
