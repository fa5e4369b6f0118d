"""The server's speculative acceptance per request (issue 36): which field each SGLang release is asked with, plain and
streamed, and what the simulator answers for it over real HTTP, shaped as SGLang's serving_chat.py shapes it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.sse import parse_stream
from pipeline.records import Prompt
from pipeline.sglang.releases import spec_details_field
from pipeline.sim import SimConfig, serve

MSGS = [{"role": "user", "content": "What is 6 times 7?"}]
SPEC_KEYS = {
    "spec_accept_rate",
    "spec_accept_length",
    "spec_cap_length",
    "spec_block_accept_length",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_verify_ct",
    "spec_correct_drafts_histogram",
    "spec_cap_lens_histogram",
}


@pytest.mark.parametrize(
    ("version", "stream", "field"),
    [
        ("0.5.23", True, "return_spec_tokens_details"),
        ("0.5.23", False, "return_spec_tokens_details"),
        ("0.5.19", True, "return_spec_tokens_details"),
        ("0.5.15", False, "return_meta_info"),
        ("0.5.14", False, "return_meta_info"),
        ("0.5.14", True, None),  # return_meta_info with stream=true is a 400 there
        ("0.5.12", False, None),
        ("0.5.9", True, None),
        (None, False, None),  # no /server_info: vLLM, or preflight skipped
        ("not a version", False, None),
    ],
    ids=["23-stream", "23-plain", "19-stream", "15-plain", "14-plain", "14-stream", "12", "9", "unknown", "garbage"],
)
def test_the_field_each_release_is_asked_with(version: str | None, stream: bool, field: str | None) -> None:
    assert spec_details_field(version, stream=stream) == field


def _client(stream: bool) -> EndpointClient:
    return EndpointClient("http://x", gen=GenerationConfig(model="m"), client=ClientConfig(stream=stream))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_the_payload_asks_only_a_server_known_to_read_it(stream: bool) -> None:
    prompt = Prompt("p1", tuple(MSGS))
    client = _client(stream)
    fields = ("return_spec_tokens_details", "return_meta_info")
    assert not set(fields) & set(client.payload(prompt, 0, "r"))  # nothing known of the server yet
    client.adopt("0.5.23", speculative=True)
    assert client.payload(prompt, 0, "r")["return_spec_tokens_details"] is True
    client.adopt("0.5.14", speculative=True)
    assert ("return_meta_info" in client.payload(prompt, 0, "r")) is not stream
    client.adopt("1.13.0", router=True)  # a router's own version is not its workers'
    assert not set(fields) & set(client.payload(prompt, 0, "r"))


def run(config: SimConfig, check: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with serve(config) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            await check(client)

    asyncio.run(main())


def _events(raw: bytes) -> list[Any]:
    return [orjson.loads(b[6:]) for b in raw.split(b"\n\n") if b.startswith(b"data: {")]


EAGLE = dict(served_model_name="m", speculative_algorithm="EAGLE", mean_output_tokens=200)


def test_a_stream_ends_with_an_sglext_chunk_before_the_usage_chunk() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        body = {"model": "m", "messages": MSGS, "stream": True, "stream_options": {"include_usage": True}}
        r = await c.post("/v1/chat/completions", json={**body, "return_spec_tokens_details": True, "rid": "s1"})
        events = _events(r.content)
        finish = next(i for i, e in enumerate(events) if e["choices"] and e["choices"][0]["finish_reason"])
        ext, usage = events[finish + 1], events[finish + 2]
        assert ext["choices"] == [] and ext["usage"] is None and set(ext["sglext"]) == {"spec_tokens_details"}
        details = ext["sglext"]["spec_tokens_details"]
        assert set(details) == SPEC_KEYS and details["spec_correct_drafts_histogram"] == []
        assert usage["choices"] == [] and "sglext" not in usage
        assert details["spec_accept_length"] == usage["usage"]["completion_tokens"] / details["spec_verify_ct"]
        wire = parse_stream(r.content)  # what the client reads of it
        assert (wire.spec_accept_length, wire.spec_verify_ct) == (
            details["spec_accept_length"],
            details["spec_verify_ct"],
        )
        sent = (await c.get("/_sim/stats")).json()["spec_by_rid"]
        assert sent == {"s1": [details["spec_accept_length"], details["spec_verify_ct"]]}
        plain = await c.post("/v1/chat/completions", json={**body, "stream": False})
        assert "sglext" not in plain.json()  # not asked: not sent

    run(SimConfig(**EAGLE), check)


def test_a_plain_body_carries_the_details_at_the_top_level() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        body = {"model": "m", "messages": MSGS, "return_spec_tokens_details": True}
        details = (await c.post("/v1/chat/completions", json=body)).json()["sglext"]["spec_tokens_details"]
        assert set(details) == SPEC_KEYS and details["spec_verify_ct"] >= 1

    run(SimConfig(**EAGLE), check)


def test_0_5_14_refuses_return_meta_info_on_a_stream_and_answers_it_plain() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        body = {"model": "m", "messages": MSGS, "return_meta_info": True}
        r = await c.post("/v1/chat/completions", json={**body, "stream": True})
        assert r.status_code == 400 and "not supported with streaming" in r.json()["message"]
        meta = (await c.post("/v1/chat/completions", json=body)).json()["choices"][0]["meta_info"]
        assert meta["spec_verify_ct"] >= 1 and meta["spec_accept_length"] > 1
        r = await c.post("/v1/chat/completions", json={**body, "return_spec_tokens_details": True})
        assert "sglext" not in r.json()  # 0.5.14 does not know the field

    run(SimConfig(**EAGLE, version="0.5.14"), check)


def test_a_server_without_speculative_decoding_sends_no_details() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        body = {"model": "m", "messages": MSGS, "return_spec_tokens_details": True}
        assert "sglext" not in (await c.post("/v1/chat/completions", json=body)).json()
        stream = await c.post("/v1/chat/completions", json={**body, "stream": True})
        assert not any("sglext" in e for e in _events(stream.content))

    run(SimConfig(served_model_name="m", mean_output_tokens=200), check)
