"""How the ranks show each other their next collective: through the store, or over direct sockets.

The precheck (:mod:`harness.collectives.precheck`) publishes one message per collective and
waits for each peer's message at the same position. Two transports behind one interface
(``begin``, ``publish``, ``fetch``):

* :class:`StoreExchange` -- keys in the group's store. It works wherever the store does (torchrun
  and mpirun launches on several hosts, the isolated re-runs, a ``HashStore`` in tests), but
  every message is a round trip to the process that hosts the store, and a waiting rank is woken
  through it: 176 us per exchange and rank, two ranks on the 2-core machine.
* :class:`SocketExchange` -- a Unix socket between every two ranks of a controlled group (its
  ranks are on the controller's host by construction): a message is one write to each peer, a
  wait is a read of that peer's socket, 20 us per exchange and rank on the same machine.

Messages carry the case's token; a message of another case (a peer's end marker that nobody
read, say) is dropped when it is read.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time

__harness_hidden__ = True

_HEADER = struct.Struct("!I")
_BUFFER_BYTES = 1 << 20      # per socket and direction: room for every message of a long case


class ExchangeTimeout(Exception):
    """The peer's message did not come within the deadline."""


class PeerGone(Exception):
    """The peer's end of the exchange closed (its process ended)."""


class StoreExchange:
    """Keys in ``store``, whose timeout is the deadline (the precheck sets it)."""

    def __init__(self, store):
        self.store = store
        self.prefix = None

    def begin(self, prefix: str) -> None:
        self.prefix = prefix

    def publish(self, k: int, rank: int, text: str) -> None:
        self.store.set(f"{self.prefix}{k}/{rank}", text)

    def fetch(self, k: int, peer: int):
        try:
            return self.store.get(f"{self.prefix}{k}/{peer}")     # blocks up to the deadline
        except Exception as exc:   # the store's timeout (DistStoreError)
            text = str(exc).lower()
            if "timeout" in text or "timed out" in text:
                raise ExchangeTimeout() from None
            raise


class SocketExchange:
    """This rank's ends of the sockets to every peer (:func:`connect_peers` makes them)."""

    def __init__(self, peers: dict, deadline_s: float):
        self.peers = peers                       # rank -> connected socket
        self.deadline_s = deadline_s
        self.prefix = None
        self._buffers = {p: bytearray() for p in peers}
        self._received: dict[int, dict] = {p: {} for p in peers}     # peer -> position -> message

    def begin(self, prefix: str) -> None:
        self.prefix = prefix
        for got in self._received.values():
            got.clear()

    def publish(self, k: int, rank: int, text: str) -> None:
        frame = json.dumps([self.prefix, k, text]).encode()
        data = _HEADER.pack(len(frame)) + frame
        for sock in self.peers.values():
            try:
                sock.sendall(data)
            except socket.timeout:
                raise ExchangeTimeout() from None
            except OSError:
                pass             # a peer that is gone: whoever waits for it finds out at its read

    def fetch(self, k: int, peer: int) -> str:
        got = self._received[peer]
        end = time.monotonic() + self.deadline_s
        sock = self.peers[peer]
        while k not in got:
            left = end - time.monotonic()
            if left <= 0:
                raise ExchangeTimeout()
            readable, _, _ = select.select([sock], [], [], left)
            if not readable:
                raise ExchangeTimeout()
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise PeerGone()
            self._take(peer, chunk)
        return got.pop(k)

    def _take(self, peer: int, chunk: bytes) -> None:
        buf = self._buffers[peer]
        buf += chunk
        while len(buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(buf)
            if len(buf) < _HEADER.size + n:
                break
            prefix, k, text = json.loads(bytes(buf[_HEADER.size:_HEADER.size + n]))
            del buf[:_HEADER.size + n]
            if prefix == self.prefix:
                self._received[peer][k] = text

    def close(self) -> None:
        for sock in self.peers.values():
            try:
                sock.close()
            except OSError:
                pass
        self.peers = {}


def connect_peers(name: str, rank: int, world: int, store, deadline_s: float) -> dict:
    """A connected Unix socket to every other rank: each rank listens at the abstract address
    ``<name>-pc-<rank>`` (Linux's abstract namespace: no path, so no limit from a long TMPDIR and
    nothing left on disk), says so in ``store``, connects to every lower rank and accepts every
    higher one. ``name``: unique to the group (its run folder's name). Returns rank -> socket."""
    def address(r: int) -> str:
        return f"\0{name}-pc-{r}"

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(rank))
        listener.listen(max(1, world))
        store.set(f"pc-listening/{rank}", "1")
        peers = {}
        for p in range(rank):
            store.wait([f"pc-listening/{p}"])
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(address(p))
            sock.sendall(_HEADER.pack(rank))
            peers[p] = sock
        listener.settimeout(max(30.0, deadline_s))
        while len(peers) < world - 1:
            sock, _ = listener.accept()
            sock.settimeout(max(30.0, deadline_s))
            (p,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
            peers[p] = sock
    finally:
        listener.close()
    for sock in peers.values():
        sock.settimeout(deadline_s)          # a send that cannot go on for a whole deadline
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER_BYTES)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER_BYTES)
    return peers


def _recv_exactly(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise PeerGone()
        data += chunk
    return data
