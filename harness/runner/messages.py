"""Messages between the controller and its ranks: one dataclass per kind, plain data only.

Every message carries the protocol version; a mismatch is refused with a clear error. Each is
sent as JSON over a ``multiprocessing.connection`` with an authkey. The run's settings are not
in any message: a rank reads them once, at start, from its group's run folder
(:mod:`harness.runner.rank.settings`). Both sides handle each kind by a table from message
class to handler, so a kind without a handler is an error, never silently dropped.
"""

from __future__ import annotations

import dataclasses
import json

from harness.errors import HarnessError

VERSION = 2

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


def encode(msg) -> bytes:
    kind = type(msg).__name__
    if kind not in KINDS:
        raise ProtocolError(f"can't send a {kind}: not a message kind")
    body = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    try:
        # Bodies are plain data, so JSON can take the fields as they are; dataclasses.asdict would
        # deep-copy every value first (about 10x the cost of the encoding itself for a case result).
        return json.dumps({"v": VERSION, "kind": kind, "body": body}).encode()
    except TypeError:
        # A nested dataclass somewhere: asdict turns it into a dict (JSON still refuses anything else).
        return json.dumps({"v": VERSION, "kind": kind, "body": dataclasses.asdict(msg)}).encode()


def decode(data: bytes):
    obj = json.loads(data.decode())
    if obj.get("v") != VERSION:
        raise ProtocolError(f"message protocol version {obj.get('v')} received, {VERSION} expected: "
                            f"controller and ranks run different harness versions")
    cls = KINDS.get(obj.get("kind"))
    if cls is None:
        raise ProtocolError(f"unknown message kind {obj.get('kind')!r}")
    return cls(**obj["body"])
