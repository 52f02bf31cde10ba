"""The hazards of part B of the tenth blind census (docs/log/2026-12-07-scan-blind-census-10-b.md), reproduced.

One test per true hazard the census found: forced onto the dead object's address, the released
code answers for the dead object; with the first object kept alive (the control) it answers
right. A test runs only against the release the census read and is skipped, naming it, otherwise:

    pip install --target DIR ddapm-test-agent==1.69.1
    pip install --target DIR sigexec==2026.51
    PYTHONPATH=DIR ./scripts/test cases/blind/test_blind_census_10_b.py -q

sigexec's operation is a function the test makes, so that test holds the first one in a
one-item list and makes the next with ``land`` (through ``_next``, which makes it anywhere for
the control); ddapm-test-agent's stored request is made by aiohttp's server for each request it
receives, so that test places it with ``born_on_death_of``. Everything the libraries run is
released code, unchanged, driven through its own HTTP routes or its own graph API.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tempfile
import time

from cases.blind.pinned import Pins, only_holder
from cases.blind.pinned import next_object as _next
from harness.idreuse.landing import born_on_death_of
from harness.idreuse.morgue import quiet_allocator

PINS = Pins("ddapm-test-agent==1.69.1", "sigexec==2026.51")


def test_sigexec_gives_an_operation_a_dead_operations_port_analysis():
    """sigexec/core/graph.py:401-457 caches which ports an operation reads in the class-level
    ``Graph._metadata_analysis_cache[id(op_func)]``, never pruned and holding nothing of the
    function; with ``optimize_ports`` (the default) each operation is then handed only those
    ports (:459-500, :660-700). An operation born on a dead operation's address is handed the
    dead one's ports and cannot find its own."""
    sigexec = PINS.need("sigexec", "sigexec")
    import numpy as np

    def make(port: str):
        if port == "gain_a":
            def scale(g):
                return sigexec.GraphData(data=g.data * g.gain_a)
        else:
            def scale(g):
                return sigexec.GraphData(data=g.data * g.gain_b)
        return scale

    def run(op):
        graph = sigexec.Graph().add(op, name="scale")
        try:
            out = graph.run(sigexec.GraphData(data=np.ones(4), metadata={"gain_a": 2.0, "gain_b": 3.0}))
        except AttributeError as missing:        # "Port 'gain_b' not found. Available ports: [...]"
            return str(missing)
        return float(out.data[0])

    kept = []   # every operation analysed stays alive, so the control can't be born on one

    def answer(reuse: bool):
        box = [make("gain_a")]
        assert run(box[0]) == 2.0
        alive = box[0] if not reuse else None
        with quiet_allocator():
            later, held = _next(box, lambda: make("gain_b"), reuse)
        del held
        kept.extend([later, alive])
        return run(later)

    forced = answer(reuse=True)
    assert isinstance(forced, str) and "gain_b" in forced   # released: the dead op's ports only
    assert answer(reuse=False) == 3.0                       # control


def _lapdog_app(server, tmp: str):
    return server.make_app(
        enabled_checks=[], log_span_fmt="[{name}]", snapshot_dir=tmp, snapshot_ci_mode=False,
        snapshot_ignored_attrs=[], agent_url="", trace_request_delay=0.0, suppress_trace_parse_errors=False,
        pool_trace_check_failures=False, disable_error_responses=False, snapshot_removed_attrs=[],
        snapshot_regex_placeholders={}, vcr_cassettes_directory=tmp, vcr_ci_mode=False, vcr_provider_map="",
        vcr_ignore_headers="", vcr_json_body_normalizers="", vcr_body_regex_normalizers="", dd_site="",
        dd_api_key=None, disable_llmobs_data_forwarding=True)


def _llmobs_payload(name: str, number: int) -> str:
    span = {"name": name, "span_id": str(1000 + number), "trace_id": str(5000 + number), "parent_id": "undefined",
            "start_ns": time.time_ns(), "duration": 1000, "status": "ok", "tags": [],
            "meta": {"span": {"kind": "llm"}, "input": {"value": name}, "output": {"value": name}}, "metrics": {}}
    return json.dumps({"ml_app": "census", "tags": [], "spans": [span]})


def test_ddapm_lists_a_cleared_requests_spans_for_a_request_born_on_its_address():
    """lapdog/llmobs_event_platform.py:1084-1120 caches the spans decoded from each stored
    LLMObs request in ``decoded_llmobs_span_events[id(req)]`` (the comment: "only brittle if
    agent requests are cleared"); ``/test/session/clear`` (ddapm_test_agent/agent.py:1666-1686)
    drops the stored requests and leaves the cache. A request born on a cleared request's
    address is listed with the cleared request's spans."""
    PINS.need("ddapm-test-agent", "ddapm_test_agent")
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer
    from lapdog import server

    async def listed(reuse: bool, tmp: str) -> list:
        app = _lapdog_app(server, tmp)
        api, agent = app["llmobs_event_platform_api"], app["agent"]
        headers = {"Content-Type": "application/json"}
        async with TestClient(TestServer(app)) as client:
            assert (await client.post("/evp_proxy/v2/api/v2/llmobs", data=_llmobs_payload("first", 1),
                                      headers=headers)).status == 200
            answer = await (await client.post("/api/v1/logs-analytics/list", json={"list": {"limit": 10}})).json()
            assert answer["hitCount"] == 1                       # decoded, and cached by id(request)
            assert [s["name"] for s in api.get_llmobs_spans()] == ["first"]
            box = [agent._requests[-1]]
            assert (await client.get("/test/session/clear")).status == 200
            assert agent._requests == [] or all(r is not box[0] for r in agent._requests)
            alive = box[0] if not reuse else None
            gc.collect()                                         # the request's cycles, gone
            if reuse:
                only_holder(box, "the cleared request")
                with quiet_allocator(), born_on_death_of(web.Request, box) as landing:
                    response = await client.post("/evp_proxy/v2/api/v2/llmobs", data=_llmobs_payload("second", 2),
                                                 headers=headers)
                landing.require()
            else:
                response = await client.post("/evp_proxy/v2/api/v2/llmobs", data=_llmobs_payload("second", 2),
                                             headers=headers)
            assert response.status == 200
            names = [s["name"] for s in api.get_llmobs_spans()]
            del alive
            return names

    with tempfile.TemporaryDirectory(prefix="census10b-") as tmp:    # snapshot and cassette dirs
        assert asyncio.run(listed(reuse=True, tmp=tmp)) == ["first"]     # released: the cleared request's spans
        assert asyncio.run(listed(reuse=False, tmp=tmp)) == ["second"]   # control
