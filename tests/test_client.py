from typing import Any

import orjson
import pytest

from pipeline.config import GenerationConfig
from pipeline.endpoints.client import _parse_sse, build_payload_base, request_seed
from pipeline.endpoints.reasoning import split_reasoning
from pipeline.errors import RetryableRequestError


@pytest.mark.parametrize(
    ("content", "reasoning", "finish", "expected"),
    [
        ("\n\nThe answer is 4.", "Two plus two.", "stop", ("Two plus two.", "The answer is 4.")),
        ("Two plus two.\n</think>\n\nThe answer is 4.", None, "stop", ("Two plus two.", "The answer is 4.")),
        ("<think>Two plus two.</think>4", None, "stop", ("Two plus two.", "4")),
        ("still thinking about it", None, "length", ("still thinking about it", "")),
        ("just an answer", None, "stop", ("just an answer", "")),  # qwen3 force mode: no </think>, all reasoning
        ("a</think>b</think>c", None, "stop", ("a", "b</think>c")),
    ],
    ids=[
        "parser-on",
        "parser-off-no-open-tag",
        "parser-off-open-tag",
        "truncated-parser-off",
        "no-tags",
        "first-close",
    ],
)
def test_split_reasoning(content: str, reasoning: str | None, finish: str, expected: tuple[str | None, str]) -> None:
    assert split_reasoning(content, reasoning, thinking=True) == expected  # the finish reason no longer matters


def test_thinking_off_keeps_content() -> None:
    assert split_reasoning("x</think>y", None, thinking=False) == (None, "x</think>y")


def test_request_seed_is_stable_and_varies_by_attempt() -> None:
    assert request_seed(0, "p1", 0) == request_seed(0, "p1", 0)
    assert len({request_seed(0, "p1", a) for a in range(4)}) == 4
    assert request_seed(0, "p1", 0) != request_seed(1, "p1", 0)
    assert 0 <= request_seed(5, "x" * 1000, 3) < 2**31


def test_payload_always_sends_max_tokens_and_thinking() -> None:
    base = build_payload_base(GenerationConfig(model="Qwen3.6-27B", max_tokens=123, thinking=False))
    assert base["max_tokens"] == 123
    assert base["chat_template_kwargs"] == {"enable_thinking": False}
    assert base["separate_reasoning"] is True


def _sse(events: list[object], done: bool = True, eol: bytes = b"\n") -> bytes:
    body = b"".join(b"data: " + orjson.dumps(e) + eol + eol for e in events)
    return body + (b"data: [DONE]" + eol + eol if done else b"")


def _read(raw: bytes) -> dict[str, Any]:
    return _parse_sse(raw, "http://sim")


_EVENTS: list[object] = [
    {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
    *({"choices": [{"delta": {"reasoning_content": f"r{i} "}}]} for i in range(20)),
    *({"choices": [{"delta": {"reasoning_content": None, "content": f"c{i} "}}]} for i in range(5)),
    {"choices": [{"delta": {}, "finish_reason": "stop"}], "model": "m"},
    {"choices": [], "usage": {"completion_tokens": 25}},
]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_sse_reads_the_same_whatever_the_line_ends(eol: bytes) -> None:
    out = _read(_sse(_EVENTS, eol=eol) + b"data: {ignored after done}\n\n")
    assert out == {
        "content": "".join(f"c{i} " for i in range(5)),
        "reasoning": "".join(f"r{i} " for i in range(20)),
        "finish_reason": "stop",
        "usage": {"completion_tokens": 25},
        "model": "m",
    }


@pytest.mark.parametrize(
    "raw",
    [
        _sse(_EVENTS[:3]) .replace(b'"r0 "', b'"r0 '),  # a torn object
        _sse(_EVENTS[:2]).replace(b"data: {", b"data: 1,{", 1),  # two values in one payload
        _sse([*_EVENTS[:2], [1, 2]]),  # not an object
    ],
    ids=["torn", "two-values", "not-an-object"],
)  # fmt: skip
def test_sse_refuses_an_invalid_chunk(raw: bytes) -> None:
    with pytest.raises(RetryableRequestError, match="invalid JSON in an SSE chunk"):
        _read(raw)


def test_sse_error_event_and_missing_done() -> None:
    with pytest.raises(RetryableRequestError, match="HTTP 503: busy"):
        _read(_sse([_EVENTS[1], {"error": {"code": 503, "message": "busy"}}]))
    with pytest.raises(RetryableRequestError, match="without \\[DONE\\]"):
        _read(_sse(_EVENTS, done=False))
