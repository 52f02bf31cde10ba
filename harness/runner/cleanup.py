"""Removing what a group leaves behind: shared-memory segments by name prefix."""

from __future__ import annotations

import os

SHM_DIR = "/dev/shm"


def unlink_shm_prefix(prefix: str) -> list[str]:
    removed = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return removed
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
            except OSError:
                pass
    return removed
