"""Messages between the controller and its ranks: one dataclass per kind, plain data only.

Every message carries the protocol version; a mismatch is refused with a clear error. Each is
sent over a ``multiprocessing.connection`` with an authkey, as one frame: the message as one
line of JSON, then the raw bytes of any ``bytes`` value in it (a rank's records of its FP8 state,
megabytes for a wide model), each after its length, so that they are neither base64-encoded nor
escaped into the JSON. The run's settings are not
in any message: a rank reads them once, at start, from its group's run folder
(:mod:`harness.runner.rank.settings`). Both sides handle each kind by a table from message
class to handler, so a kind without a handler is an error, never silently dropped.
"""

from __future__ import annotations

import dataclasses
import json
import struct

from harness.errors import HarnessError

VERSION = 3

__harness_hidden__ = True


@dataclasses.dataclass
class Hello:            # rank -> controller, once connected
    rank: int
    world_size: int
    pid: int
    host: str = ""


@dataclasses.dataclass
class Ready:            # rank -> controller, once its process group is up
    rank: int


@dataclasses.dataclass
class RunCase:          # controller -> every rank
    index: int
    case: dict


@dataclasses.dataclass
class RunIsolated:      # controller -> every rank: run the case alone, in a fresh child and group
    index: int
    case: dict


@dataclasses.dataclass
class CaseDone:         # rank -> controller
    index: int
    rank: int
    result: dict
    isolated: bool = False


@dataclasses.dataclass
class Stalled:          # rank -> controller: the rank's watchdog saw no progress for too long
    rank: int
    seconds: float
    in_flight: dict | None
    index: int = -1     # the case it is stalled in (a late report of an earlier case is ignored)


@dataclasses.dataclass
class Recycle:          # controller -> every rank: reset the stack, start a fresh process group
    generation: int
    new_group: bool = True   # False: only registries (the precheck stopped every mismatch before gloo)


@dataclasses.dataclass
class Shutdown:         # controller -> every rank
    pass


KINDS = {cls.__name__: cls for cls in (Hello, Ready, RunCase, RunIsolated, CaseDone, Stalled, Recycle, Shutdown)}


class ProtocolError(HarnessError):
    pass


_BLOB = "$blob"          # {"$blob": i} in the JSON line stands for the i-th bytes value after it
_LENGTH = struct.Struct("<Q")


def encode(msg) -> bytes:
    kind = type(msg).__name__
    if kind not in KINDS:
        raise ProtocolError(f"can't send a {kind}: not a message kind")
    blobs = []

    def bytes_apart(value):
        if isinstance(value, (bytes, bytearray, memoryview)):
            blobs.append(value)
            return {_BLOB: len(blobs) - 1}
        raise TypeError(f"{type(value).__name__} is not plain data")

    body = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    try:
        # Bodies are plain data, so JSON can take the fields as they are; dataclasses.asdict would
        # deep-copy every value first (about 10x the cost of the encoding itself for a case result).
        line = json.dumps({"v": VERSION, "kind": kind, "body": body}, default=bytes_apart)
    except TypeError:
        # A nested dataclass somewhere: asdict turns it into a dict (JSON still refuses anything else).
        blobs.clear()
        line = json.dumps({"v": VERSION, "kind": kind, "body": dataclasses.asdict(msg)}, default=bytes_apart)
    if not blobs:
        return line.encode()
    parts = [line.encode(), b"\n"]     # JSON escapes every newline inside a string: this one ends the line
    for blob in blobs:
        parts += [_LENGTH.pack(len(blob)), blob]
    return b"".join(parts)


def decode(data: bytes):
    end = data.find(b"\n")
    if end < 0:
        obj = json.loads(data.decode())
    else:
        view = memoryview(data)
        blobs = _blobs(view, end + 1)
        obj = json.loads(bytes(view[:end]).decode(), object_hook=lambda d: _blob(d, blobs))
    if obj.get("v") != VERSION:
        raise ProtocolError(f"message protocol version {obj.get('v')} received, {VERSION} expected: "
                            f"controller and ranks run different harness versions")
    cls = KINDS.get(obj.get("kind"))
    if cls is None:
        raise ProtocolError(f"unknown message kind {obj.get('kind')!r}")
    return cls(**obj["body"])


def _blobs(view: memoryview, offset: int) -> list:
    blobs = []
    while offset < len(view):
        if offset + _LENGTH.size > len(view):
            raise ProtocolError(f"a message's bytes end inside the length of its value {len(blobs)}")
        (n,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if offset + n > len(view):
            raise ProtocolError(f"a message's bytes end at {len(view)}, {offset + n} announced")
        blobs.append(view[offset:offset + n])
        offset += n
    return blobs


def _blob(d: dict, blobs: list):
    if len(d) == 1 and _BLOB in d:
        i = d[_BLOB]
        if not isinstance(i, int) or not 0 <= i < len(blobs):
            raise ProtocolError(f"a message names bytes value {i!r}; it carries {len(blobs)}")
        return blobs[i]
    return d
