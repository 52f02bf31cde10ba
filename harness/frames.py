"""Which stack frames are the harness's own machinery, and so never a call site or a culprit.

A module marks itself with ``__harness_hidden__ = True`` at module level. The collective ledger
skips such frames when it records where a collective was issued, and a case's traceback is
trimmed of them before it is shown: what remains is the stack under test and the user's code.
The marker travels with the module, so moving a file changes nothing about what is shown.
Frames of the interpreter's standard library, of torch, and of pytest and pluggy are skipped by
their location, since they are not ours to mark.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import traceback

MARKER = "__harness_hidden__"

_STDLIB_DIR = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_FOREIGN = ("<frozen", "/_pytest/", "/pluggy/")


@functools.lru_cache(maxsize=None)
def _torch_dir() -> str:
    import torch

    return os.path.realpath(os.path.dirname(torch.__file__)) + os.sep


@functools.lru_cache(maxsize=None)
def foreign_file(filename: str) -> bool:
    """The file belongs to the standard library, torch, pytest or pluggy.

    Cached per file name: resolving symlinks (``realpath``) costs a system call per path
    component, and every collective walks the same few files.
    """
    if any(part in filename for part in _FOREIGN):
        return True
    real = os.path.realpath(filename)
    return real.startswith((_STDLIB_DIR, _torch_dir())) or filename.startswith((_STDLIB_DIR, _torch_dir()))


def hidden(frame) -> bool:
    """True for a frame of a marked harness module or of the standard library, torch or pytest."""
    return bool(frame.f_globals.get(MARKER)) or foreign_file(frame.f_code.co_filename)


def user_traceback(exc: BaseException, limit: int = 6) -> str:
    """The traceback of ``exc`` with the harness's own frames (marked modules) left out.

    Only marked modules and ``contextlib`` are dropped here: torch's frames stay, since an error
    raised inside torch is often best understood from them.
    """
    frames = _user_frames(exc)
    summary = traceback.StackSummary.extract(iter(frames[-limit:]), lookup_lines=True)
    return "".join(summary.format()).rstrip()


def _user_frames(exc: BaseException) -> list:
    return [(frame, lineno) for frame, lineno in traceback.walk_tb(exc.__traceback__)
            if not frame.f_globals.get(MARKER) and not frame.f_code.co_filename.endswith("contextlib.py")]


def innermost_site(exc: BaseException) -> str | None:
    """Where ``exc`` was raised, as ``path/to/file.py function`` (the innermost frame
    :func:`user_traceback` shows; the path's last three parts, no line number), or None."""
    frames = _user_frames(exc)
    if not frames:
        return None
    code = frames[-1][0].f_code
    return f"{'/'.join(code.co_filename.split(os.sep)[-3:])} {code.co_name}"
