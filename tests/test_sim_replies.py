"""Scripted replies (`--replies`) over real HTTP: a scripted prompt's texts come back byte for byte, plain and
streamed (in N-character deltas with `--stream-chunk-chars`), cut by max_tokens, counted when aborted; every other
prompt gets the text it always got."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from pipeline.sim import SimConfig, SimStartupError, serve
from pipeline.sim.replies import load_replies

ROW = ("| " + " | ".join(f"cell {i:03d} of the repeated row" for i in range(21)))[:648] + " |"  # 650 characters
TEXTS = {
    "sentence_100_times": ("I must check the answer.\n" * 3, "The answer is 7.\n" * 100),
    "empty_table_100_rows": ("A table with no data.", "| a | b | c |\n|---|---|---|\n" + "|   |   |   |\n" * 100),
    "runaway_40k": ("Wait, let me recompute the sum again. " * 1200, "Final: 42"),
    "prose_with_650_char_row": ("", "Here it is.\n\n" + (ROW + "\n") * 6 + "\nThat is the whole table, as asked."),
    "non_ascii": ("Grüße, 世界 — naïve 🙂\u2028\u2029\x85\r\n\t", "Ответ: ½ · ∑ 🧮\r\nthe end\x00?\u200b"),
    "sse_lookalikes": ("data: [DONE]\n\n\n", 'data: {"choices": []}\n\ndata: [DONE]\n\n\n\nevent: x\n: comment\n\n'),
    "one_char": ("", "x"),
    "empty_content": ("thinking only", ""),
}
REPLIES = [
    {"prompt": f"scripted {name}", "reasoning": reasoning or None, "content": content}
    for name, (reasoning, content) in TEXTS.items()
]
CUT = {"prompt": "runs away", "reasoning": "again and again. " * 300, "content": "", "finish_reason": "length"}
MARKED = {"prompt": "marked", "content": "a short answer that looped", "loops": True}
QWEN3 = SimConfig(reasoning_parser="qwen3", mean_output_tokens=200)


@pytest.fixture
def replies(tmp_path: Path) -> str:
    path = tmp_path / "replies.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in [*REPLIES, CUT, MARKED]) + b"\n")
    return str(path)


def _body(prompt: str, **kw: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}]
    return {"model": "m", "messages": messages, **kw}


def _events(raw: bytes) -> list[Any]:
    """SSE events split on the blank line that ends each one (JSON never holds a raw newline), not on lines as a
    text decoder sees them: U+2028 and U+0085 are line breaks to `str.splitlines`."""
    assert raw.endswith(b"\n\n")
    events = []
    for block in raw[:-2].split(b"\n\n"):
        assert block.startswith(b"data: ")
        events.append(block[6:].decode() if block == b"data: [DONE]" else orjson.loads(block[6:]))
    return events


def _joined(events: list[Any]) -> tuple[str, str, list[str], list[str], str | None]:
    """(reasoning, content, reasoning deltas, content deltas, finish_reason) of a chat stream."""
    reasoning: list[str] = []
    content: list[str] = []
    finish = None
    for event in events[1:]:
        if event == "[DONE]" or not event["choices"]:
            continue
        choice = event["choices"][0]
        reasoning += [choice["delta"]["reasoning_content"]] if choice["delta"].get("reasoning_content") else []
        content += [choice["delta"]["content"]] if choice["delta"].get("content") else []
        finish = choice["finish_reason"] or finish
    return "".join(reasoning), "".join(content), reasoning, content, finish


async def _stream(c: httpx.AsyncClient, body: dict[str, Any]) -> list[Any]:
    async with c.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        return _events(await r.aread())


def _tokens(chars: str) -> int:
    return -(-len(chars) // 4)


@pytest.mark.parametrize("name", list(TEXTS), ids=list(TEXTS))
@pytest.mark.parametrize("chars", [0, 7], ids=["token_deltas", "7_char_deltas"])
def test_a_scripted_reply_comes_back_exactly_plain_and_streamed(replies: str, name: str, chars: int) -> None:
    reasoning, content = TEXTS[name]
    assert len(ROW) == 650 and len(TEXTS["runaway_40k"][0]) > 40_000

    async def main() -> None:
        cfg = QWEN3.replace(replies=replies, stream_chunk_chars=chars)
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            r = await c.post("/v1/chat/completions", json=_body(f"scripted {name}"))
            choice, usage = r.json()["choices"][0], r.json()["usage"]
            assert choice["message"]["reasoning_content"] == (reasoning or None)
            assert choice["message"]["content"] == content
            assert choice["finish_reason"] == "stop"
            assert usage["completion_tokens"] == _tokens(reasoning) + 1 + _tokens(content) + 1  # </think>, EOS
            streamed = _joined(await _stream(c, _body(f"scripted {name}")))
            assert streamed[:2] == (reasoning, content) and streamed[4] == "stop"
            if chars:  # every delta 7 characters but the last of each part
                for deltas in streamed[2:4]:
                    assert all(len(d) == 7 for d in deltas[:-1]) and all(0 < len(d) <= 7 for d in deltas[-1:])
            stats = (await c.get("/_sim/stats")).json()
            assert stats["scripted"]["generations"] == 2 and stats["looping"]["generations"] == 0

    asyncio.run(main())


def test_the_split_follows_the_parser_and_thinking(replies: str) -> None:
    """No parser: the raw text, `</think>` and all, in content; thinking off: no think block, the content alone."""
    reasoning, content = TEXTS["sentence_100_times"]
    prompt = "scripted sentence_100_times"

    async def main() -> None:
        async with serve(SimConfig(replies=replies)) as url, httpx.AsyncClient(base_url=url) as c:
            message = (await c.post("/v1/chat/completions", json=_body(prompt))).json()["choices"][0]["message"]
            assert message == {
                "role": "assistant",
                "content": reasoning + "</think>" + content,
                "reasoning_content": None,
            }
            assert _joined(await _stream(c, _body(prompt)))[:2] == ("", reasoning + "</think>" + content)
        async with serve(QWEN3.replace(replies=replies)) as url, httpx.AsyncClient(base_url=url) as c:
            off = _body(prompt, chat_template_kwargs={"enable_thinking": False})
            r = (await c.post("/v1/chat/completions", json=off)).json()
            assert r["choices"][0]["message"]["content"] == content
            assert r["choices"][0]["message"]["reasoning_content"] is None
            assert r["usage"]["completion_tokens"] == _tokens(content) + 1
            assert _joined(await _stream(c, off))[:2] == ("", content)

    asyncio.run(main())


def test_max_tokens_cuts_a_scripted_reply(replies: str) -> None:
    reasoning, content = TEXTS["sentence_100_times"]
    r_tokens = _tokens(reasoning)

    async def main() -> None:
        cfg = QWEN3.replace(replies=replies, stream_chunk_chars=7)
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            for max_tokens, shown in [(5, (reasoning[:20], "")), (r_tokens + 1 + 10, (reasoning, content[:40]))]:
                body = _body("scripted sentence_100_times", max_tokens=max_tokens)
                r = (await c.post("/v1/chat/completions", json=body)).json()
                message = r["choices"][0]["message"]
                assert (message["reasoning_content"], message["content"]) == shown
                assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == max_tokens
                got = _joined(await _stream(c, body))
                assert (got[0], got[1], got[4]) == (*shown, "length")

    asyncio.run(main())


def test_a_reply_that_ran_to_the_limit_ends_there_and_counts_as_a_loop(replies: str) -> None:
    async def main() -> None:
        async with serve(SimConfig(replies=replies)) as url, httpx.AsyncClient(base_url=url) as c:
            r = (await c.post("/v1/chat/completions", json=_body("runs away"))).json()
            assert r["choices"][0]["message"]["content"] == CUT["reasoning"]  # inside the think block: no </think>
            assert r["choices"][0]["finish_reason"] == "length"
            tokens = _tokens(CUT["reasoning"])
            assert r["usage"]["completion_tokens"] == tokens
            marked = (await c.post("/v1/chat/completions", json=_body("marked"))).json()
            assert marked["choices"][0]["finish_reason"] == "stop"
            assert marked["choices"][0]["message"]["content"] == "</think>" + MARKED["content"]
            stats = (await c.get("/_sim/stats")).json()
            marked_tokens = 1 + _tokens(MARKED["content"]) + 1
            assert stats["looping"] == {"generations": 2, "tokens": tokens + marked_tokens}
            assert stats["scripted"] == stats["looping"] and stats["faults"] == {}

    asyncio.run(main())


async def _until(c: httpx.AsyncClient, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 30  # a bound for a hang, not a measure
    while not condition(stats := (await c.get("/_sim/stats")).json()):
        assert time.monotonic() < deadline, stats
        await asyncio.sleep(0.02)
    return stats


@pytest.mark.parametrize("how", ["abort_request", "client_leaves"])
def test_an_aborted_scripted_stream_counts_what_it_decoded(replies: str, how: str) -> None:
    """A lone request decodes at ~380 tokens/s here, so the runaway reply's 1,275 tokens would take over 3 s: stopped
    after 20 deltas, what it decoded is counted as cancelled, scripted and (it ran to the limit) looping."""

    async def main() -> None:
        cfg = QWEN3.replace(replies=replies, decode_tokens_per_s=20000.0, stream_interval_s=0.01)
        cfg = cfg.replace(stream_chunk_chars=7)
        body = _body("runs away", stream=True, rid="away")
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            shown, deltas = "", 0
            async with c.stream("POST", "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():  # (ASCII text: lines are safe here)
                    if not line.startswith("data: {"):
                        continue
                    choice = orjson.loads(line[6:])["choices"][0]
                    shown += choice["delta"].get("reasoning_content") or ""
                    deltas += 1
                    if deltas == 20:
                        if how == "client_leaves":
                            break
                        assert (await c.post("/abort_request", json={"rid": "away"})).is_success
            assert CUT["reasoning"].startswith(shown) and len(shown) >= 19 * 7
            stats = await _until(c, lambda s: s["in_flight"] == 0 and s["scripted"]["generations"] == 1)
        tokens = stats["scripted"]["tokens"]
        assert len(shown) // 4 <= tokens < _tokens(CUT["reasoning"]) // 2
        assert stats["looping"] == stats["scripted"] and stats["cancelled_tokens"] == tokens
        assert stats["cancelled"] == 1 and stats["generations_total"] == 0

    asyncio.run(main())


def test_timed_streams_send_exact_text_in_7_char_deltas(replies: str) -> None:
    reasoning, content = TEXTS["non_ascii"]

    async def main() -> None:
        cfg = QWEN3.replace(replies=replies, decode_tokens_per_s=20000.0, stream_interval_s=0.01)
        async with serve(cfg.replace(stream_chunk_chars=7)) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            got = _joined(await _stream(c, _body("scripted non_ascii")))
        assert got[:2] == (reasoning, content) and got[4] == "stop"
        for text, deltas in ((reasoning, got[2]), (content, got[3])):
            assert [len(d) for d in deltas] == [7] * (len(text) // 7) + [len(text) % 7] * (len(text) % 7 > 0)

    asyncio.run(main())


def test_unscripted_prompts_get_the_text_they_always_got(replies: str) -> None:
    async def main() -> None:
        async def answers(cfg: SimConfig) -> list[Any]:
            async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
                out = []
                for prompt in ("scripted", "scripted sentence_100_times ", "another question"):
                    r = (await c.post("/v1/chat/completions", json=_body(prompt, seed=3))).json()
                    out.append((r["choices"][0], r["usage"]))
                # the prompt is the last user message's: an earlier one does not count
                earlier = [{"role": "user", "content": "scripted one_char"}, {"role": "assistant", "content": "x"}]
                body = {"model": "m", "messages": [*earlier, {"role": "user", "content": "and now?"}]}
                out.append((await c.post("/v1/chat/completions", json=body)).json()["choices"][0])
                stats = (await c.get("/_sim/stats")).json()
                assert stats["scripted"] == {"generations": 0, "tokens": 0}
                return out

        assert await answers(QWEN3.replace(replies=replies)) == await answers(QWEN3)

    asyncio.run(main())


def test_flags_and_refused_files(replies: str, tmp_path: Path) -> None:
    config = SimConfig.from_argv(["--replies", replies, "--stream-chunk-chars", "7"])
    assert (config.replies, config.stream_chunk_chars) == (replies, 7)
    assert len(load_replies(replies)) == len(REPLIES) + 2
    bad = tmp_path / "bad.jsonl"
    cases = {
        '{"prompt": "a", "content": "b", "finish": "stop"}': "line 2: unknown key 'finish'",
        '{"prompt": "a", "content": null}': "'prompt' and 'content' must be strings",
        '{"prompt": "a", "content": "b", "finish_reason": "abort"}': "'finish_reason' must be",
        '{"prompt": "x", "content": "again"}': "line 2: prompt already scripted on line 1",
        "not json": "line 2:",
    }
    for line, message in cases.items():
        bad.write_text('{"prompt": "x", "content": "y"}\n' + line + "\n")
        with pytest.raises(SimStartupError, match=message) as info:
            load_replies(bad)
        assert info.value.exit_code == 2
    with pytest.raises(SimStartupError, match="can't open"):
        load_replies(tmp_path / "missing.jsonl")
    with pytest.raises(SimStartupError, match="count must be at least 0"):
        SimConfig.from_argv(["--stream-chunk-chars", "-1"])


def test_char_deltas_on_other_routes_and_under_a_reset(replies: str) -> None:
    """`--stream-chunk-chars` cuts /v1/completions deltas too, and a reset still breaks a stream after its first
    deltas (not after all of them)."""

    async def main() -> None:
        cfg = QWEN3.replace(replies=replies, stream_chunk_chars=7)
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            body = {"model": "m", "prompt": "Say something.", "max_tokens": 50, "stream": True}
            async with c.stream("POST", "/v1/completions", json=body) as r:
                events = _events(await r.aread())
            texts = [e["choices"][0]["text"] for e in events[:-1]]
            assert [len(t) for t in texts[:-1]] == [7] * (len(texts) - 1) and 0 < len(texts[-1]) <= 7
            assert len("".join(texts)) == 200 and events[-2]["choices"][0]["finish_reason"] == "length"
        async with serve(cfg.replace(p_reset=1.0)) as url, httpx.AsyncClient(base_url=url) as c:
            raw = b""
            with pytest.raises(httpx.RemoteProtocolError):
                async with c.stream(
                    "POST", "/v1/chat/completions", json=_body("scripted runaway_40k", stream=True)
                ) as r:
                    async for part in r.aiter_bytes():
                        raw += part
            assert b"[DONE]" not in raw and 0 < raw.count(b"reasoning_content") <= 4

    asyncio.run(main())


def test_releases_up_to_0_5_12_strip_a_plain_content_but_stream_it_whole(replies: str) -> None:
    reasoning, content = TEXTS["sse_lookalikes"]

    async def main() -> None:
        cfg = QWEN3.replace(replies=replies, version="0.5.12")
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            r = await c.post("/v1/chat/completions", json=_body("scripted sse_lookalikes"))
            message = r.json()["choices"][0]["message"]
            assert (message["reasoning_content"], message["content"]) == (reasoning, content.strip())
            assert _joined(await _stream(c, _body("scripted sse_lookalikes")))[:2] == (reasoning, content)

    asyncio.run(main())
