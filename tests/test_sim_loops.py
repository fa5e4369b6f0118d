"""The simulator's loop fault over real HTTP: a share of thinking generations, fixed by prompt and seed, fall into
a verbatim loop part-way and run to max_tokens at the decode rate; `/_sim/stats` counts what they decoded, an
aborted one included."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson

from pipeline.loops import find_loop
from pipeline.sim import SimConfig, serve

CFG = SimConfig(reasoning_parser="qwen3", mean_output_tokens=300)


def _body(i: int, seed: int, max_tokens: int = 4096, **kw: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": f"problem {i}"}],
        "max_tokens": max_tokens,
        "seed": seed,
        **kw,
    }


async def _loops(c: httpx.AsyncClient, i: int, seed: int) -> bool:
    choice = (await c.post("/v1/chat/completions", json=_body(i, seed))).json()["choices"][0]
    loop = find_loop(choice["message"]["reasoning_content"])
    if choice["finish_reason"] == "length":  # only a loop runs to 4,096 tokens at a mean of 300
        assert loop is not None and choice["message"]["content"] == ""
        return True
    assert loop is None and choice["message"]["content"]
    return False


def test_a_share_of_generations_loop_fixed_by_prompt_and_seed() -> None:
    async def main() -> None:
        async with serve(CFG.replace(loop_share=0.2)) as url, httpx.AsyncClient(base_url=url) as c:
            first = [await _loops(c, i, seed=1) for i in range(200)]
            again = [await _loops(c, i, seed=1) for i in range(200)]
            other = [await _loops(c, i, seed=2) for i in range(200)]
            stats = (await c.get("/_sim/stats")).json()
        assert first == again  # the same prompt and seed: the same fate, whatever the attempt
        assert first != other  # a new seed draws again
        assert 20 <= sum(first) <= 60 and 20 <= sum(other) <= 60
        loops = 2 * sum(first) + sum(other)
        assert stats["faults"]["loop"] == loops
        assert stats["looping"] == {"generations": loops, "tokens": loops * 4096}

    asyncio.run(main())


def test_no_loop_without_thinking_or_the_flag() -> None:
    async def main() -> None:
        async with serve(CFG.replace(loop_share=1.0)) as url, httpx.AsyncClient(base_url=url) as c:
            body = _body(0, 1, chat_template_kwargs={"enable_thinking": False})
            choice = (await c.post("/v1/chat/completions", json=body)).json()["choices"][0]
            assert choice["finish_reason"] == "stop"
        async with serve(CFG) as url, httpx.AsyncClient(base_url=url) as c:
            assert not any([await _loops(c, i, seed=1) for i in range(50)])

    asyncio.run(main())
    assert SimConfig.from_argv(["--loop-share", "0.05"]).loop_share == 0.05


def test_a_looping_stream_runs_at_the_decode_rate_and_an_abort_stops_its_decode() -> None:
    """A lone request decodes at ~380 tokens/s here, so its 4,096 tokens would take ~11 s: the abort comes once the
    loop shows in the stream, and the decode stops there."""

    async def main() -> None:
        cfg = CFG.replace(loop_share=1.0, decode_tokens_per_s=20000.0, stream_interval_s=0.01)
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            body = _body(0, 1, stream=True, rid="loop-0")
            reasoning, finish, aborted_at = "", None, 0
            async with c.stream("POST", "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    event = orjson.loads(line[6:])
                    for choice in event["choices"]:
                        reasoning += choice["delta"].get("reasoning_content") or ""
                        finish = choice["finish_reason"] or finish
                    if finish is None and not aborted_at and find_loop(reasoning):
                        aborted_at = len(reasoning)
                        assert (await c.post("/abort_request", json={"rid": "loop-0"})).is_success
            for _ in range(500):  # the abort ends the decode; its count lands as the handler unwinds
                stats = (await c.get("/_sim/stats")).json()
                if stats["looping"]["generations"]:
                    break
                await asyncio.sleep(0.01)
        assert finish == "abort"
        assert aborted_at // 4 <= len(reasoning) // 4 <= stats["looping"]["tokens"] < 4096 / 2
        assert stats["cancelled"] == 1 and stats["generations_total"] == 0

    asyncio.run(main())
