"""sse.parse_stream: SGLang's framing read by one parse, any other framing line by line, both alike."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.endpoints import sse
from pipeline.endpoints.sse import ErrorEvent, InvalidStream, parse_stream
from pipeline.endpoints.wire import Wire


def event(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An SGLang chat.completion.chunk (python/sglang/srt/entrypoints/openai/protocol.py's field order)."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "matched_stop": None}
    return {"id": "abc", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice], **extra}


def stream(
    texts: list[tuple[str, str]], dumps: Any = orjson.dumps, eol: bytes = b"\n", data: bytes = b"data: "
) -> bytes:
    events = [event({"role": "assistant", "content": "", "reasoning_content": None})]
    events += [event({key: text}) for key, text in texts]
    last = event({"content": None})
    last["choices"][0].update(finish_reason="stop", matched_stop=151645)
    events += [last, {**event({}), "choices": [], "usage": {"completion_tokens": len(texts)}}]
    body = b"".join(data + dumps(e) + eol + eol for e in events)
    return body + data + b"[DONE]" + eol + eol


def expected(texts: list[tuple[str, str]], tokens: int | None = None) -> Wire:
    reasoning = "".join(t for k, t in texts if k == "reasoning_content")
    return Wire(
        content="".join(t for k, t in texts if k == "content"),
        reasoning=reasoning or None,
        finish_reason="stop",
        completion_tokens=len(texts) if tokens is None else tokens,
        model="m",
    )


def spaced(obj: Any) -> bytes:
    return json.dumps(obj).encode()  # ", " and ": " separators, non-ASCII as \\u escapes


TRICKY = [
    ("reasoning_content", 'a "quoted" \\ back\\slash'),
    ("reasoning_content", 'say "content": "x", then\n\ndata: {"content": "y"}'),
    ("reasoning_content", "émoji 🙂 and 中文"),
    ("content", 'data: [DONE] "finish_reason": "stop", "error": 1'),
    ("content", "tab\tand\u0001control"),
]


@pytest.mark.parametrize("dumps", [orjson.dumps, spaced], ids=["compact", "spaced"])
@pytest.mark.parametrize(
    "framing", [(b"\n", b"data: "), (b"\r\n", b"data: "), (b"\n", b"data:")], ids=["sglang", "crlf", "no-space"]
)
def test_text_that_looks_like_framing_is_read_as_text(dumps: Any, framing: tuple[bytes, bytes]) -> None:
    assert parse_stream(stream(TRICKY, dumps, *framing)) == expected(TRICKY)


def test_sglang_text_events_are_taken_by_one_split_and_the_rest_parsed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    framed: list[bytes] = []
    lines: list[bytes] = []
    real_framed = sse._framed
    monkeypatch.setattr(sse, "_framed", lambda body: framed.append(body) or real_framed(body))
    monkeypatch.setattr(sse, "_line_by_line", lambda body: lines.append(body) or ([], True))
    texts = [("reasoning_content", f"r{i} ") for i in range(200)] + [("content", f"c{i} ") for i in range(40)]
    assert parse_stream(stream(texts)) == expected(texts)
    assert framed[0].count(b"data:") == 3  # left for the full parse: the finish and usage events, and [DONE]
    assert lines == []  # never line by line
    parse_stream(stream(texts, eol=b"\r\n"))
    assert len(framed[1]) == len(stream(texts, eol=b"\r\n")) and len(lines) == 1  # other framing: all of it is


def test_an_event_of_another_shape_mid_stream_is_parsed_in_full() -> None:
    texts = [("reasoning_content", f"r{i} ") for i in range(5)]
    raw = stream(texts)
    odd = orjson.dumps({**event({"reasoning_content": "odd "}), "system_fingerprint": "x"})
    *head, tail = raw.split(b"\n\n", 3)
    raw = b"\n\n".join([*head, b"data: " + odd, tail])  # after the role event, r0 and r1
    want = dataclasses.replace(expected(texts), reasoning="r0 r1 odd r2 r3 r4 ")
    assert parse_stream(raw) == want


@pytest.mark.parametrize(
    "line",
    [
        b'data: {"choices":[{"delta":{"content":"torn}}]}',
        b'data: 1,{"choices":[{"delta":{"content":"x"}}]}',
        b'data: ["content", "x"]',
        b'data: {"choices":[{"delta":{"content":"bad \\q escape"}}]}',
    ],
    ids=["torn", "two-values", "not-an-object", "bad-escape"],
)
def test_an_event_that_is_not_one_object_is_refused(line: bytes) -> None:
    first, rest = stream([("content", "a")]).split(b"\n\n", 1)
    with pytest.raises(InvalidStream, match="invalid JSON"):
        parse_stream(first + b"\n\n" + line + b"\n\n" + rest)  # after the role event, among the text deltas


def test_an_error_event_and_a_missing_done() -> None:
    with pytest.raises(ErrorEvent) as err:
        parse_stream(
            stream([("content", "a")]).replace(b"data: [DONE]", b'data: {"error": {"code": 503, "message": "busy"}}')
        )
    assert (err.value.status, err.value.message) == (503, "busy")
    with pytest.raises(InvalidStream, match="without \\[DONE\\]"):
        parse_stream(stream([("content", "a")]).replace(b"data: [DONE]\n\n", b""))


texts_st = st.lists(st.tuples(st.sampled_from(["content", "reasoning_content"]), st.text(max_size=12)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(texts=texts_st, compact=st.booleans(), crlf=st.booleans())
def test_any_text_reads_as_it_was_sent(texts: list[tuple[str, str]], compact: bool, crlf: bool) -> None:
    raw = stream(texts, orjson.dumps if compact else spaced, b"\r\n" if crlf else b"\n")
    nonempty = [(k, t) for k, t in texts if t]
    assert parse_stream(raw) == expected(nonempty, len(texts))
