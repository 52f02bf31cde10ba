"""Who shrinks a failure: with several rank groups side by side, the first group to find it.

Every group of a ``--groups`` run is its own process with its own record. When one finds a
failure whose signature (:mod:`harness.stress.signature`) it has not seen, it asks its claims
whether to shrink it: the first group to claim a signature shrinks it and checks its repro;
the others count their cases against it and go on running cases. So two groups that hit one
failure cause one shrink and one verification; ``stress merge`` joins the counts.

The claims are files in one folder the groups share (``<out>/claims``), created with
``O_CREAT | O_EXCL``, which the kernel makes atomic: exactly one creator wins. A run of one
group (no shared folder) owns every failure it finds (:class:`OwnClaims`).

Called by :class:`harness.stress.session.StressSession` for each new signature, and by its
``--max-failures`` check (the failures found by all groups).
"""

from __future__ import annotations

import hashlib
import os
from typing import Protocol


class Claims(Protocol):
    def claim(self, signature: str) -> int | None:
        """None when this group shrinks ``signature``; else the group that does."""

    def count(self) -> int:
        """Distinct signatures claimed by every group so far."""


class OwnClaims:
    """A run alone: it shrinks every failure it finds."""

    def __init__(self):
        self._seen: set[str] = set()

    def claim(self, signature: str) -> int | None:
        self._seen.add(signature)
        return None

    def count(self) -> int:
        return len(self._seen)


class FolderClaims:
    """Claims shared through a folder by the groups of one run (each group a process)."""

    def __init__(self, folder: str, group: int):
        self.folder = folder
        self.group = group
        os.makedirs(folder, exist_ok=True)

    def _path(self, signature: str) -> str:
        return os.path.join(self.folder, hashlib.sha1(signature.encode()).hexdigest()[:16] + ".claim")

    def claim(self, signature: str) -> int | None:
        path = self._path(signature)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return self._owner(path)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{self.group}\n{signature}\n")
        return None

    def _owner(self, path: str) -> int:
        # The winner writes its number right after creating the file; an empty read means it is
        # between the two: it is another group's either way.
        try:
            with open(path) as fh:
                first = fh.readline().strip()
            return int(first) if first.isdigit() else -1
        except OSError:
            return -1

    def count(self) -> int:
        try:
            return sum(1 for name in os.listdir(self.folder) if name.endswith(".claim"))
        except OSError:
            return 0
