"""Shared-memory segments: one file per (communicator, rank, kind) under ``/dev/shm``.

The owner rank creates a segment; every peer maps it by name. This is the CPU stand-in for
Userbuffers' CUDA-IPC registration: each rank's buffer lives in memory that every peer
can write into directly.

Why raw ``/dev/shm`` files and ``mmap`` rather than ``multiprocessing.shared_memory``: on
Python 3.11 and 3.12 every ``SharedMemory`` object, even one that only *attaches* to an
existing segment, is registered with the process's resource tracker, and the tracker
unlinks it when that process exits (``track=False`` appears only in 3.13). A peer that
maps our buffer and exits would then destroy it under us, and a crash would trigger
"leaked shared_memory" clean-ups we did not ask for. Plain files give one behaviour on
every Python: ``O_CREAT | O_EXCL`` creation by the owner, mapping by name, and removal
only by our own code -- :meth:`Segment.unlink` in the owner, or :func:`unlink_prefix` run
by a controller after a rank was killed. Every name begins with a run-specific prefix, so
that controller can find everything a run left behind with one directory listing.

Segments are views-friendly: :meth:`Segment.view` returns a ``torch.uint8`` tensor that
aliases the mapping (no copy), and torch kernels that read or write it release the GIL.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets

import torch

from harness.errors import HarnessError, SetupError, UsageError

SHM_DIR = "/dev/shm"
DEFAULT_PREFIX = "fp8h-"
PAGE = mmap.PAGESIZE

# Prefixes and names go straight into file names: keep them to a safe alphabet, and long
# enough that unlink_prefix cannot sweep away unrelated files by accident.
_PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{3,}$")
_PART_RE = re.compile(r"^[A-Za-z0-9_]+$")


def new_prefix(base: str = DEFAULT_PREFIX) -> str:
    """A fresh run prefix, ``fp8h-<pid>-<8 hex digits>``: unique per run, easy to sweep."""
    return f"{base}{os.getpid()}-{secrets.token_hex(4)}"


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is safe to use in ``/dev/shm`` names, else raise UsageError."""
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
        raise UsageError(
            f"shared-memory prefix {prefix!r} must be at least 4 characters of [A-Za-z0-9_.-] "
            f"starting with a letter or digit (e.g. {new_prefix()!r})")
    return prefix


def segment_name(prefix: str, communicator: str, rank: int, kind: str) -> str:
    """``<prefix>-<communicator>-r<rank>-<kind>``, e.g. ``fp8h-4242-1a2b3c4d-qkv-r1-data``."""
    check_prefix(prefix)
    for part, what in ((communicator, "communicator name"), (kind, "segment kind")):
        if not _PART_RE.match(part):
            raise UsageError(f"{what} {part!r} must be made of [A-Za-z0-9_]")
    return f"{prefix}-{communicator}-r{int(rank)}-{kind}"


def _shm_dir() -> str:
    if not os.path.isdir(SHM_DIR):
        raise SetupError(f"{SHM_DIR} does not exist: the Userbuffers emulation needs Linux shared memory")
    return SHM_DIR


def page_round(nbytes: int) -> int:
    """``nbytes`` rounded up to whole pages (at least one page)."""
    return max(PAGE, -(-int(nbytes) // PAGE) * PAGE)


class Segment:
    """One mapped shared-memory file. Create with :meth:`create` (owner) or :meth:`attach`.

    ``close()`` unmaps; ``unlink()`` removes the file (owner only, by convention). A peer
    that still maps an unlinked segment keeps valid memory until it unmaps, as with any
    POSIX shared memory, so an owner may unlink while peers are still finishing.
    """

    def __init__(self, name: str, path: str, nbytes: int, owner: bool, mapping: mmap.mmap):
        self.name = name
        self.path = path
        self.nbytes = nbytes
        self.owner = owner
        self._mmap: mmap.mmap | None = mapping
        self._tensor: torch.Tensor | None = torch.frombuffer(mapping, dtype=torch.uint8)
        self._words: memoryview | None = memoryview(mapping)
        self.unlinked = False

    @classmethod
    def create(cls, name: str, nbytes: int) -> "Segment":
        """Create ``/dev/shm/<name>`` of ``nbytes`` (page-rounded), zero-filled; fail if it exists."""
        path = os.path.join(_shm_dir(), name)
        size = page_round(nbytes)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except FileExistsError:
            raise HarnessError(
                f"shared-memory segment {path} already exists: another run uses the same prefix, "
                f"or a crashed run left it behind (remove it with harness.comm.unlink_prefix)") from None
        try:
            os.ftruncate(fd, size)       # tmpfs: sparse, zero-filled, pages allocated on first touch
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return cls(name, path, size, True, mapping)

    @classmethod
    def attach(cls, name: str, nbytes: int) -> "Segment":
        """Map a peer's existing segment; its size must be at least ``nbytes``."""
        path = os.path.join(_shm_dir(), name)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise HarnessError(f"shared-memory segment {path} does not exist: its owner has not "
                               f"created it, or already closed it") from None
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                raise HarnessError(f"shared-memory segment {path} has {size} bytes, expected at least "
                                   f"{nbytes}: ranks disagree on the communicator's size")
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return cls(name, path, size, False, mapping)

    @property
    def closed(self) -> bool:
        return self._mmap is None

    def view(self, offset: int = 0, nbytes: int | None = None) -> torch.Tensor:
        """A ``uint8`` tensor aliasing bytes ``[offset, offset + nbytes)`` of the mapping."""
        if self._tensor is None:
            raise HarnessError(f"shared-memory segment {self.path} is closed")
        if nbytes is None:
            nbytes = self.nbytes - offset
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise HarnessError(f"range [{offset}, {offset + nbytes}) outside segment {self.path} "
                               f"of {self.nbytes} bytes")
        return self._tensor[offset:offset + nbytes]

    def buffer(self) -> memoryview:
        """The raw mapping as a memoryview, for small ``struct`` reads and writes."""
        if self._words is None:
            raise HarnessError(f"shared-memory segment {self.path} is closed")
        return self._words

    def close(self) -> None:
        """Unmap. Tensors returned by :meth:`view` that are still alive keep the mapping
        alive until they die (``mmap.close`` refuses while views exist; then the mapping is
        released with the last view instead)."""
        if self._mmap is None:
            return
        mapping, self._mmap = self._mmap, None
        self._tensor = None
        if self._words is not None:
            self._words.release()
            self._words = None
        try:
            mapping.close()
        except BufferError:
            pass   # a caller still holds a view; the mapping goes when that view does

    def unlink(self) -> None:
        """Remove the file (idempotent). Memory stays valid for whoever still maps it."""
        if self.unlinked:
            return
        self.unlinked = True
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else "mapped"
        return f"Segment({self.path!r}, {self.nbytes} bytes, {'owner' if self.owner else 'peer'}, {state})"


def leftover_segments(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Names of the ``/dev/shm`` entries starting with ``prefix``, sorted (nothing is removed)."""
    if not prefix:
        raise UsageError("leftover_segments needs a non-empty prefix")
    try:
        names = os.listdir(_shm_dir())
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def unlink_prefix(prefix: str) -> list[str]:
    """Remove every ``/dev/shm/<prefix>*`` file; return the names removed, sorted.

    Meant for a controller after a run, crashed ranks included: segments whose owner died
    are never unlinked by anyone else. Entries another process removes meanwhile are skipped.
    """
    check_prefix(prefix)
    removed = []
    for name in leftover_segments(prefix):
        path = os.path.join(SHM_DIR, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(name)
    return removed
