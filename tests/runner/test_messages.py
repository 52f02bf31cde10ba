"""The controller <-> rank messages: plain data, versioned, one handler per kind."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.runner import messages as msg
from harness.runner.group import _dispatch

EXAMPLES = [
    msg.Hello(rank=1, world_size=2, pid=123, host="node-a"),
    msg.Ready(rank=0),
    msg.RunCase(index=3, case={"name": "x"}),
    msg.RunIsolated(index=3, case={"name": "x"}),
    msg.CaseDone(index=3, rank=1, result={"case": "x", "rank": 1}, isolated=True),
    msg.CaseDone(index=4, rank=0, result={"case": "x", "states": {"layout": [], "data": bytes(range(256)) * 3,
                                                                    "more": [b"", b"\n{\"$blob\": 0}\n"]}}),
    msg.Stalled(rank=1, seconds=12.5, in_flight={"op": "all_reduce", "seq": 4}, index=3),
    msg.Recycle(generation=2, new_group=False),
    msg.Shutdown(),
]


def test_bytes_travel_raw_after_the_json_line():
    records = bytes(range(256)) * 1000
    data = msg.encode(msg.CaseDone(index=0, rank=0, result={"states": {"data": records}}))
    assert records in data and len(data) < len(records) + 200      # not base64 (a third larger)
    back = msg.decode(data)
    assert bytes(back.result["states"]["data"]) == records


@pytest.mark.parametrize("cut", [1, 8, 12, 20])
def test_a_frame_cut_short_is_refused_not_misread(cut):
    data = msg.encode(msg.CaseDone(index=0, rank=0, result={"states": {"data": b"x" * 16}}))
    with pytest.raises(msg.ProtocolError, match="bytes end"):
        msg.decode(data[:-cut])


def test_a_frame_naming_bytes_it_does_not_carry_is_refused():
    line = json.dumps({"v": msg.VERSION, "kind": "CaseDone",
                       "body": {"index": 0, "rank": 0, "result": {"data": {"$blob": 1}}}}).encode()
    with pytest.raises(msg.ProtocolError, match="carries 1"):
        msg.decode(line + b"\n" + (3).to_bytes(8, "little") + b"abc")


def test_every_kind_is_covered_here():
    assert {type(m).__name__ for m in EXAMPLES} == set(msg.KINDS)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message):
    back = msg.decode(msg.encode(message))
    assert type(back) is type(message) and back == message


def test_a_message_of_another_version_is_refused_with_the_reason():
    data = json.loads(msg.encode(msg.Ready(rank=0)))
    data["v"] = msg.VERSION + 1
    with pytest.raises(msg.ProtocolError, match="different harness versions"):
        msg.decode(json.dumps(data).encode())


def test_unknown_kinds_are_refused_both_ways():
    @dataclasses.dataclass
    class Gossip:
        text: str

    with pytest.raises(msg.ProtocolError, match="not a message kind"):
        msg.encode(Gossip("hi"))
    with pytest.raises(msg.ProtocolError, match="unknown message kind 'Gossip'"):
        msg.decode(json.dumps({"v": msg.VERSION, "kind": "Gossip", "body": {"text": "hi"}}).encode())


def test_only_plain_data_crosses():
    with pytest.raises(TypeError):
        msg.encode(msg.RunCase(index=0, case={"tensor": object()}))


def test_the_controller_dispatches_by_kind_and_refuses_an_unexpected_one():
    seen = []
    handlers = {msg.Ready: lambda rank, m: seen.append(("ready", rank)), "eof": lambda rank, _: seen.append(("eof", rank)),
                "bad": lambda rank, body: seen.append(("bad", body[1]))}
    _dispatch(handlers, (1, msg.Ready(rank=1)))
    _dispatch(handlers, (0, "eof"))
    _dispatch(handlers, (0, ("bad", "garbled")))
    assert seen == [("ready", 1), ("eof", 0), ("bad", "garbled")]
    with pytest.raises(msg.ProtocolError, match="rank 1 sent a Shutdown message the controller does not expect"):
        _dispatch(handlers, (1, msg.Shutdown()))
