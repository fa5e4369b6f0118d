"""Streams that stall, trickle or are aborted, over real HTTP: what a stall detector and `/abort_request` meet."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from pipeline.sim import SimConfig, serve

QWEN3 = SimConfig(reasoning_parser="qwen3", mean_output_tokens=400)


def _body(i: int = 0, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2000, **kw}


def _event(line: str) -> Any:
    payload = line.removeprefix("data: ")
    return payload if payload == "[DONE]" else orjson.loads(payload)


async def _stats(c: httpx.AsyncClient) -> dict[str, Any]:
    return (await c.get("/_sim/stats")).json()


async def _until(c: httpx.AsyncClient, condition: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """Stats once `condition` holds of them (polled: the test synchronises on the server's state, never a sleep;
    the 30 s bound is for a hang, not a measure)."""
    deadline = time.monotonic() + 30
    while not condition(stats := await _stats(c)):
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {stats}"
        await asyncio.sleep(0.02)
    return stats


async def _settled(c: httpx.AsyncClient) -> dict[str, Any]:
    """Stats once the server has noticed every disconnect (in_flight back to 0)."""
    return await _until(c, lambda stats: stats["in_flight"] == 0, "every request to end")


class _Events:
    """A stream's SSE events, read a few at a time (httpx iterates a response only once)."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def take(self, n: int) -> list[Any]:
        out: list[Any] = []
        while len(out) < n:
            line = await anext(self._lines)
            if line.startswith("data: "):
                out.append(_event(line))
        return out

    async def rest(self) -> list[Any]:
        return [_event(line) async for line in self._lines if line.startswith("data: ")]


def test_stall_sends_a_prefix_then_silence_until_the_client_leaves() -> None:
    async def main() -> None:
        async with serve(QWEN3.replace(p_stall=1.0)) as url, httpx.AsyncClient(base_url=url) as c:
            events: list[Any] = []
            with pytest.raises(httpx.ReadTimeout):
                async with c.stream("POST", "/v1/chat/completions", json=_body(stream=True), timeout=0.5) as r:
                    assert r.status_code == 200
                    async for line in r.aiter_lines():
                        if line.startswith("data: "):
                            events.append(_event(line))
            assert events[0]["choices"][0]["delta"]["role"] == "assistant"
            deltas = [e["choices"][0]["delta"] for e in events[1:]]
            assert deltas and all(d.get("reasoning_content") for d in deltas)  # some thinking, then nothing
            assert all(e["choices"][0]["finish_reason"] is None for e in events)
            stats = await _settled(c)
            assert stats["faults"]["stall"] == 1 and stats["cancelled"] == 1
            assert stats["generations_total"] == 0

    asyncio.run(main())


def test_abort_request_ends_a_stalled_stream_gracefully() -> None:
    async def main() -> None:
        async with serve(QWEN3.replace(p_stall=1.0)) as url, httpx.AsyncClient(base_url=url, timeout=5) as c:
            body = _body(stream=True, rid="stuck-1", stream_options={"include_usage": True})
            async with c.stream("POST", "/v1/chat/completions", json=body) as r:
                events = _Events(r)
                head = await events.take(3)  # role chunk and the deltas before the stall
                assert (await c.post("/abort_request", json={"rid": "stuck-1"})).status_code == 200
                rest = await events.rest()
            assert head[0]["id"] == "stuck-1"
            finish, usage, done = rest[-3:]
            assert finish["choices"][0]["finish_reason"] == "abort" and finish["choices"][0]["matched_stop"] is None
            shown = sum(len(e["choices"][0]["delta"].get("reasoning_content") or "") for e in head[1:] + rest[:-3])
            assert usage["choices"] == [] and usage["usage"]["completion_tokens"] * 4 == shown
            assert done == "[DONE]"
            stats = await _settled(c)
            assert stats["cancelled"] == 1 and stats["generations_total"] == 0

    asyncio.run(main())


def test_abort_by_the_generated_id_and_non_streaming_stalls() -> None:
    async def main() -> None:
        async with serve(QWEN3.replace(p_stall=1.0)) as url, httpx.AsyncClient(base_url=url, timeout=5) as c:
            async with c.stream("POST", "/v1/chat/completions", json=_body(1, stream=True)) as r:
                events = _Events(r)
                (role,) = await events.take(1)
                await c.post("/abort_request", json={"rid": role["id"]})  # SGLang's rid is the response id
                tail = await events.rest()
            assert tail[-2]["choices"][0]["finish_reason"] == "abort" and tail[-1] == "[DONE]"
            with pytest.raises(httpx.ReadTimeout):  # non-streaming: a hang
                await c.post("/v1/chat/completions", json=_body(2), timeout=0.3)
            task = asyncio.create_task(c.post("/v1/chat/completions", json=_body(3, rid="quiet")))
            await _until(c, lambda stats: stats["faults"].get("stall") == 3, "the third request to stall")
            await c.post("/abort_request", json={"rid": "quiet"})
            choice = (await task).json()["choices"][0]
            assert choice["finish_reason"] == "abort" and choice["message"]["content"] == ""
            stats = await _settled(c)
            assert stats["faults"]["stall"] == 3 and stats["cancelled"] == 3

    asyncio.run(main())


def test_trickle_paces_streams_but_not_plain_responses() -> None:
    async def main() -> None:
        cfg = QWEN3.replace(trickle_s=0.1)
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url, timeout=5) as c:
            arrivals: list[float] = []
            events: list[Any] = []
            async with c.stream("POST", "/v1/chat/completions", json=_body(stream=True, max_tokens=24)) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        arrivals.append(time.perf_counter())
                        events.append(_event(line))
            assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
            deltas = [e for e in events[1:-1] if e["choices"][0]["delta"].get("reasoning_content")]
            assert len(deltas) == 3  # 24 tokens in 8-token deltas
            # Paced: the server sent the three deltas at least 0.1 s apart (a lower bound: a busy machine only
            # stretches it; how the gaps fall on this side depends on when the client got to read).
            assert arrivals[-1] - arrivals[0] >= 0.25, arrivals
            gaps = [b - a for a, b in itertools.pairwise(arrivals)]
            assert max(gaps) < 1.0, gaps  # alive: never silent for long (10x the trickle interval)
            assert (await c.post("/v1/chat/completions", json=_body(1, max_tokens=24))).status_code == 200
            stats = await _stats(c)  # the plain response was not trickled: the fault counted once, for the stream
            assert stats["faults"]["trickle"] == 1 and stats["generations_total"] == 2 and stats["cancelled"] == 0

    asyncio.run(main())


def test_abort_ends_a_trickle_and_a_timed_stream() -> None:
    async def main() -> None:
        async with serve(QWEN3.replace(trickle_s=0.2)) as url, httpx.AsyncClient(base_url=url, timeout=5) as c:
            async with c.stream("POST", "/v1/chat/completions", json=_body(stream=True, rid="slow")) as r:
                events = _Events(r)
                await events.take(2)
                await c.post("/abort_request", json={"rid": "slow"})
                tail = await events.rest()
            assert tail[-2]["choices"][0]["finish_reason"] == "abort"
            assert (await _settled(c))["cancelled"] == 1
        timed = SimConfig(model_path="Qwen/Qwen3-8B", decode_tokens_per_s=200, max_running_requests=4)
        async with serve(timed) as url, httpx.AsyncClient(base_url=url, timeout=5) as c:
            async with c.stream("POST", "/v1/chat/completions", json=_body(stream=True, rid="t1")) as r:
                events = _Events(r)
                await events.take(3)
                await c.post("/abort_request", json={"rid": "t1"})
                tail = await events.rest()
            assert tail[-2]["choices"][0]["finish_reason"] == "abort" and tail[-1] == "[DONE]"
            stats = await _settled(c)
            assert stats["cancelled"] == 1 and stats["running"] == 0

    asyncio.run(main())


def test_abort_request_rejects_a_body_that_is_not_an_object() -> None:
    async def main() -> None:
        async with serve(SimConfig()) as url, httpx.AsyncClient(base_url=url) as c:
            assert (await c.post("/abort_request", json={"rid": "nobody"})).status_code == 200
            assert (await c.post("/abort_request", content=b"[1]")).status_code == 400

    asyncio.run(main())
