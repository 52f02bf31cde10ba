"""The precheck's two transports give the same answers: the store's keys and the group's sockets.

Known bad inputs: a collective that differs between two ranks (both raise CollectiveMismatch),
a peer that never publishes (ExchangeTimeout, the deadline), a peer whose process ended
(PeerGone at once), and a stale message of another case (dropped, never taken for this one).
"""

from __future__ import annotations

import os
import secrets
import socket
import threading

import pytest
import torch.distributed as dist

from harness.collectives.exchange import (ExchangeTimeout, PeerGone, SocketExchange, StoreExchange,
                                          connect_peers)
from harness.collectives.precheck import CollectiveMismatch, CollectivePrecheck, PeerLeftCase


def entry(seq: int, shape=(4,)) -> dict:
    return {"seq": seq, "op": "all_reduce", "group": [0, 1], "reduce": "MAX", "shapes": [list(shape)],
            "dtypes": ["float32"], "sites": ["model.py:1 step"]}


def socket_pair(deadline_s: float = 2.0):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return SocketExchange({1: a}, deadline_s), SocketExchange({0: b}, deadline_s)


def store_pair(deadline_s: float = 2.0):
    store = dist.HashStore()
    return StoreExchange(store), StoreExchange(store)


@pytest.mark.parametrize("make", [socket_pair, store_pair], ids=["sockets", "store"])
def test_messages_arrive_by_position_whatever_order_they_are_read_in(make):
    ex0, ex1 = make()
    ex0.begin("pc/a/")
    ex1.begin("pc/a/")
    for k in range(3):
        ex1.publish(k, 1, f"one-{k}")
    assert [ex0.fetch(k, 1) for k in (2, 0, 1)] in (["one-2", "one-0", "one-1"],
                                                    [b"one-2", b"one-0", b"one-1"])


@pytest.mark.parametrize("make", [socket_pair, store_pair], ids=["sockets", "store"])
def test_a_peer_that_never_publishes_runs_into_the_deadline(make):
    ex0, ex1 = make(0.2)
    if isinstance(ex0, StoreExchange):
        import datetime

        ex0.store.set_timeout(datetime.timedelta(seconds=0.2))
    ex0.begin("pc/a/")
    with pytest.raises(ExchangeTimeout):
        ex0.fetch(0, 1)


def test_a_message_of_another_case_is_dropped_not_taken_for_this_one():
    ex0, ex1 = socket_pair(0.3)
    ex1.begin("pc/old/")
    ex1.publish(0, 1, "old case")
    ex0.begin("pc/new/")
    ex1.begin("pc/new/")
    ex1.publish(0, 1, "new case")
    assert ex0.fetch(0, 1) == "new case"
    ex1.begin("pc/newer/")
    ex1.publish(1, 1, "not this one")
    with pytest.raises(ExchangeTimeout):
        ex0.fetch(1, 1)


def test_a_peer_whose_process_ended_is_seen_at_once():
    ex0, ex1 = socket_pair(30.0)
    ex0.begin("pc/a/")
    ex1.close()
    with pytest.raises(PeerGone):
        ex0.fetch(0, 1)
    # the precheck names it: the peer's own failure is the finding
    pc = CollectivePrecheck(dist.HashStore(), 0, 30.0, exchange=ex0)
    pc.begin_case("b")
    with pytest.raises(PeerLeftCase, match="rank 1 is gone"):
        pc(entry(0))


@pytest.mark.parametrize("make", [socket_pair, store_pair], ids=["sockets", "store"])
def test_a_differing_collective_raises_on_both_ranks(make):
    ex0, ex1 = make()
    store = dist.HashStore()
    ranks = [CollectivePrecheck(store, 0, 2.0, exchange=ex0), CollectivePrecheck(store, 1, 2.0, exchange=ex1)]
    for pc in ranks:
        pc.begin_case("c")
    errors = {}

    def one(r, shape):
        try:
            ranks[r](entry(0, shape))
        except Exception as exc:
            errors[r] = exc

    threads = [threading.Thread(target=one, args=(0, (4,))), threading.Thread(target=one, args=(1, (5,)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(errors) == [0, 1] and all(isinstance(e, CollectiveMismatch) for e in errors.values())
    assert "collective #0 differs between ranks" in str(errors[0])


def test_three_ranks_connect_to_each_other_through_the_store():
    store = dist.HashStore()
    name = f"fp8h-test-{os.getpid()}-{secrets.token_hex(4)}"
    peers = {}

    def one(r):
        peers[r] = connect_peers(name, r, 3, store, 5.0)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert {r: sorted(p) for r, p in peers.items()} == {0: [1, 2], 1: [0, 2], 2: [0, 1]}
    exchanges = {r: SocketExchange(p, 2.0) for r, p in peers.items()}
    for r, ex in exchanges.items():
        ex.begin("pc/x/")
        ex.publish(0, r, f"from {r}")
    assert [exchanges[2].fetch(0, p) for p in (0, 1)] == ["from 0", "from 1"]
    for ex in exchanges.values():
        ex.close()


def test_a_collective_carries_the_stack_call_it_was_issued_in():
    from harness.collectives.entry import format_entry
    from harness.collectives.ledger import Ledger

    ledger = Ledger()
    ledger.begin_case("c")
    with ledger.during("te.reduce_and_update_fp8_tensors(forward=True) model 1, step 0"):
        inside = ledger.record("all_reduce", (), {})
    outside = ledger.record("all_reduce", (), {})
    assert inside["during"] == "te.reduce_and_update_fp8_tensors(forward=True) model 1, step 0"
    assert "during" not in outside
    assert format_entry(inside).endswith("(during te.reduce_and_update_fp8_tensors(forward=True) model 1, step 0)")
    assert "during" not in format_entry(outside)
