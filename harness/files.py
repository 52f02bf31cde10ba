"""How the harness writes a report or record file: all of it or nothing, never half.

Every report and record the harness leaves on disk (the JSON and JUnit reports, a stress run's
``stress.json``, its pages and plots, case files, bench figures, probes) goes through
:func:`write_atomic`: the bytes go to a temporary file in the same folder, are flushed to the
disk (``fsync``), and the file is renamed over ``path``. A rename within one folder is atomic,
so a reader (another process, the next stage of a CI job, a run killed halfway through a
write) sees the old file or the new one; a failure leaves the old file and no temporary one.

Standard library only, in the bottom layer: any module of the harness may use it.
"""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through a temporary file beside it,
    flushed to the disk, then renamed over ``path``. The file gets the permissions the umask
    allows a new file (the temporary file is created private); on any failure the temporary
    file is removed and ``path`` is left as it was."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _sync_folder(folder)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _sync_folder(folder: str) -> None:
    """Make the rename itself durable (where the platform lets a folder be opened and synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
