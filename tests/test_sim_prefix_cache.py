"""The simulator's radix prefix cache: what a prompt reuses, the LRU bound, what the server reports (usage,
/metrics, /_sim/stats), and prefill time that follows the uncached tokens only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pipeline.sim import SimConfig
from pipeline.sim.prefix_cache import PrefixCache, blocks
from pipeline.sim.text import count_prompt_tokens
from tests.helpers.sim_in_process import run

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 20}


def _turns(n: int, chars: int = 400) -> list[dict[str, str]]:
    """A conversation of n user turns (answers between them), system message first."""
    out: list[dict[str, str]] = [SYSTEM]
    for k in range(n):
        if k:
            out.append({"role": "assistant", "content": f"answer {k} " + "x" * chars})
        out.append({"role": "user", "content": f"question {k} " + "y" * chars})
    return out


def _lookup(cache: PrefixCache, messages: Any) -> int:
    return cache.lookup(messages, count_prompt_tokens(messages))


@pytest.mark.parametrize(
    "prompt",
    [_turns(3), [{"role": "user", "content": [{"type": "text", "text": "abc " * 50}]}], "z" * 1000, list(range(150))],
    ids=["chat", "content-parts", "text", "token-ids"],
)
def test_blocks_weigh_what_the_server_counts(prompt: Any) -> None:
    expected = len(prompt) if isinstance(prompt[0], int) else count_prompt_tokens(prompt)
    assert sum(tokens for _, tokens in blocks(prompt)) == expected


def test_a_later_turn_reuses_the_previous_prompt_and_only_that() -> None:
    cache = PrefixCache(1 << 20)
    first, second = _turns(1), _turns(2)
    assert _lookup(cache, first) == 0
    # turn 2 = turn 1's prompt + the regenerated answer + a new question: the first prompt is reused, no more
    assert _lookup(cache, second) == count_prompt_tokens(first)
    assert _lookup(cache, second) == count_prompt_tokens(second) - 1  # an exact repeat: all but the last token
    other = [SYSTEM, {"role": "user", "content": "something else"}]
    assert _lookup(cache, other) == sum(tokens for _, tokens in blocks([SYSTEM]))  # a shared system prompt
    assert cache.lookups == 4 and cache.hits == 3


def test_the_cache_is_an_lru_bounded_in_tokens_that_evicts_leaves_first() -> None:
    conv = [_turns(1, 400), _turns(1, 401), _turns(1, 402)]
    cache = PrefixCache(count_prompt_tokens(conv[0]) + 50)  # the shared system block and one question fit
    for messages in conv:
        _lookup(cache, messages)
    assert cache.tokens <= cache.capacity and cache.evicted_tokens > 0
    assert _lookup(cache, conv[2]) == count_prompt_tokens(conv[2]) - 1  # the newest stayed whole
    assert _lookup(cache, conv[0]) == sum(t for _, t in blocks([SYSTEM]))  # the oldest question went, not the root
    cache.clear()
    assert cache.tokens == 0 and _lookup(cache, conv[2]) == 0


def _chat(messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "max_tokens": 8}


def test_the_server_reports_cached_tokens_in_usage_metrics_and_stats() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        first = (await c.post("/v1/chat/completions", json=_chat(_turns(1)))).json()
        assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        second = (await c.post("/v1/chat/completions", json=_chat(_turns(2)))).json()
        reused = count_prompt_tokens(_turns(1))
        assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": reused}
        metrics = (await c.get("/metrics")).text
        assert f'sglang:cached_tokens_total{{model_name="m"}} {reused}' in metrics
        prompt = count_prompt_tokens(_turns(1)) + count_prompt_tokens(_turns(2))
        assert f'sglang:cache_hit_rate{{model_name="m"}} {reused / prompt}' in metrics
        stats = (await c.get("/_sim/stats")).json()["prefix_cache"]
        assert stats["lookups"] == 2 and stats["hits"] == 1 and stats["cached_tokens"] == reused
        assert stats["prompt_tokens"] == prompt and stats["cached_share"] == round(reused / prompt, 4)
        assert (await c.get("/v1/loads")).json()["loads"][0]["cache_hit_rate"] == reused / prompt
        await c.post("/flush_cache")
        again = (await c.post("/v1/chat/completions", json=_chat(_turns(2)))).json()
        assert again["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}

    run(SimConfig(served_model_name="m", enable_cache_report=True, enable_metrics=True), check)


def test_no_cache_report_without_the_flag_and_no_reuse_without_the_radix_cache() -> None:
    async def check(c: httpx.AsyncClient) -> None:
        for _ in range(2):
            body = (await c.post("/v1/chat/completions", json=_chat(_turns(2)))).json()
            assert body["usage"]["prompt_tokens_details"] is None
        assert (await c.get("/_sim/stats")).json()["prefix_cache"]["cached_tokens"] > 0

    run(SimConfig(), check)

    async def disabled(c: httpx.AsyncClient) -> None:
        for _ in range(2):
            body = (await c.post("/v1/chat/completions", json=_chat(_turns(2)))).json()
            assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}

    run(SimConfig(enable_cache_report=True, disable_radix_cache=True), disabled)


def test_prefill_time_follows_the_uncached_tokens() -> None:
    """8,000-token history at 10,000 prefill tokens/s: 0.8 s cold, about nothing once cached (time scaled down).
    What the server prefilled is its own count (prompt minus cached tokens); the times are the ones it reports
    (`meta_info.e2e_latency`): a lower bound for the cold prefill, a quarter of it for the warm one (its ~1 ms
    leaves two hundredfold room for a busy machine)."""
    long = _turns(2, 16000)

    async def check(c: httpx.AsyncClient) -> None:
        meta = []
        for messages in (long, long[:-1] + [{"role": "user", "content": "one more short question"}], long):
            r = await c.post("/v1/chat/completions", json={**_chat(messages), "return_meta_info": True})
            assert r.status_code == 200
            meta.append(r.json()["choices"][0]["meta_info"])
        cold, partly, warm = meta
        uncached = [m["prompt_tokens"] - m["cached_tokens"] for m in meta]
        assert cold["cached_tokens"] == 0 and uncached[0] >= 8000  # everything prefilled
        assert 0 < uncached[1] < 100  # the history before the last question was cached
        assert warm["cached_tokens"] >= warm["prompt_tokens"] - 1  # the same prompt again: one token at most
        assert cold["e2e_latency"] >= 0.75
        assert partly["e2e_latency"] < cold["e2e_latency"] / 4 and warm["e2e_latency"] < cold["e2e_latency"] / 4

    config = SimConfig(
        decode_tokens_per_s=20000, prefill_tokens_per_s=10000, max_running_requests=4, enable_cache_report=True
    )
    run(config, check)
