"""The one reader of a JSON file given on a command line: its data, or one line of UsageError."""

from __future__ import annotations

import json

from harness.errors import UsageError


def read_json(path: str, label: str):
    """The data in ``path`` (``label``: how the user named it, ``--case-file`` or ``A``); a file that
    cannot be read or is not JSON is a :class:`UsageError` naming it, in one line."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise UsageError(f"{label} {path!r}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise UsageError(f"{label} {path!r} is not valid JSON: {where}") from None
