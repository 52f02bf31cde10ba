"""Where a rank group's controller listens for its ranks, and how a rank is told.

A Unix socket named ``ctl.sock`` in the group's run folder: the folder is the controller's own
(``mkdtemp``, mode 0700), so no other user can reach the socket, and it goes with the folder. A
socket's path has room for 107 bytes (``sun_path``), and a deep TMPDIR (a CI runner's work
folder, pytest's per-test folders, nested run folders) passes that: binding then fails with
"AF_UNIX path too long". There the controller listens at an abstract address instead (Linux: a
name without a file, reachable by name only; the connection's authentication key still keeps
other processes out), named after the run folder so it is unique. An environment variable cannot
hold the abstract name's leading NUL byte, so the ranks are told ``@name`` (as ``ss`` shows
abstract names); a run folder's path is absolute and never starts with ``@``.
"""

from __future__ import annotations

import os
import sys

__harness_hidden__ = True

SUN_PATH_BYTES = 108          # Linux's sun_path, its terminating NUL included
SOCKET_NAME = "ctl.sock"


def controller_address(run_dir: str) -> str:
    """The address for the group whose run folder is ``run_dir`` (a path, or an abstract name
    starting with NUL where the path would be too long)."""
    path = os.path.join(run_dir, SOCKET_NAME)
    if len(os.fsencode(path)) < SUN_PATH_BYTES or not sys.platform.startswith("linux"):
        return path
    return "\0" + os.path.basename(run_dir) + "-" + SOCKET_NAME


def for_environment(address: str) -> str:
    """``address`` as an environment variable can hold it."""
    return "@" + address[1:] if address.startswith("\0") else address


def from_environment(value: str) -> str:
    """The address a rank connects to, from what :func:`for_environment` gave it."""
    return "\0" + value[1:] if value.startswith("@") else value
