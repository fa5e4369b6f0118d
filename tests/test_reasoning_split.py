"""One generation, one stored row, whether or not the server runs `--reasoning-parser qwen3` (issue 19).

Parser on: the simulator's emulation of each release's qwen3 parser (`pipeline.sim.text.qwen3_message`) makes the
message, the client stores it. Parser off: the raw text goes to `content` and regen's own split
(`pipeline.endpoints.reasoning`) must reach the same (reasoning, answer). Both forms: one JSON body, and an SSE
stream read by the client's own reader.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from pipeline.endpoints.client import _parse_sse
from pipeline.endpoints.reasoning import split_reasoning
from pipeline.sglang.releases import Release
from pipeline.sim.text import qwen3_message

VERSIONS = ["0.5.9", "0.5.10.post1", "0.5.12", "0.5.14", "0.5.19", "0.5.23"]
# (raw output, thinking requested); the cases of the issue.
CASES = {
    "closed": ("Two plus two is four.\n</think>\n\nThe answer is 4.", True),
    "open-tag": ("<think>Two plus two.</think>\n\n4", True),
    "no-close-stopped": ("The answer is 4, I am sure.", True),  # qwen3 force mode: all reasoning
    "repeated-open-tag": ("<think>First idea.<think> Second idea.</think>Answer.", True),
    "leading-repeat": ("<think><think>Idea.</think>Answer.", True),
    "thinking-off-think-block": ("<think>Idea.</think>\n\nAnswer.", False),
    "thinking-off-plain": ("Just the answer.", False),
    "tool-call-no-close": ('Need a tool.\n<tool_call>\n{"name": "f"}\n</tool_call>', True),
    "empty-answer": ("Reasoning only.</think>", True),
    "whitespace": ("  \n Idea with spaces. \n</think>\n\n  Answer.  \n", True),
}


def _parser_on(raw: str, thinking: bool, version: str) -> tuple[str | None, str]:
    reasoning, content = qwen3_message(raw, Release.of(version), force=thinking)
    return split_reasoning(content or "", reasoning, thinking)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_parser_on_and_off_store_the_same_row(case: str, version: str) -> None:
    raw, thinking = CASES[case]
    assert split_reasoning(raw, None, thinking, version) == _parser_on(raw, thinking, version)


@pytest.mark.parametrize(
    ("case", "version", "expected"),
    [
        ("no-close-stopped", "0.5.23", ("The answer is 4, I am sure.", "")),
        ("repeated-open-tag", "0.5.12", ("First idea. Second idea.", "Answer.")),
        ("repeated-open-tag", "0.5.23", ("First idea.<think> Second idea.", "Answer.")),
        ("thinking-off-think-block", "0.5.23", ("Idea.", "Answer.")),
        ("tool-call-no-close", "0.5.12", ('Need a tool.\n<tool_call>\n{"name": "f"}\n</tool_call>', "")),
        ("tool-call-no-close", "0.5.14", ("Need a tool.", '<tool_call>\n{"name": "f"}\n</tool_call>')),
        ("empty-answer", "0.5.9", ("Reasoning only.", "")),
    ],
    ids=["force-mode", "every-open-tag-0.5.12", "leading-open-tag-only-0.5.23", "thinking-off", "no-tool-close-0.5.12",
         "tool-call-closes-0.5.14", "empty-answer"],
)  # fmt: skip
def test_the_split_of_each_release(case: str, version: str, expected: tuple[str | None, str]) -> None:
    raw, thinking = CASES[case]
    assert split_reasoning(raw, None, thinking, version) == expected


def _body(events: list[dict[str, Any]]) -> bytes:
    """A stream's body as SGLang frames it: `data: {...}` and a blank line per event, then `data: [DONE]`."""
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _chunks(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _stream(reasoning: str | None, content: str) -> list[dict[str, Any]]:
    """A 0.5.23-shaped chat stream: role chunk, reasoning deltas, content deltas, finish chunk."""
    events: list[dict[str, Any]] = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]}]
    events += [{"choices": [{"delta": {"reasoning_content": piece}}]} for piece in _chunks(reasoning or "")]
    events += [{"choices": [{"delta": {"reasoning_content": None, "content": p}}]} for p in _chunks(content)]
    events.append({"choices": [{"delta": {"reasoning_content": None}, "finish_reason": "stop"}], "model": "m"})
    return events


@pytest.mark.parametrize("version", ["0.5.12", "0.5.23"])
@pytest.mark.parametrize("case", list(CASES))
def test_streamed_parser_on_and_off_store_the_same_row(case: str, version: str) -> None:
    raw, thinking = CASES[case]
    reasoning, content = qwen3_message(raw, Release.of(version), force=thinking)

    on = _parse_sse(_body(_stream(reasoning, content or "")), "http://sim")
    off = _parse_sse(_body(_stream(None, raw)), "http://sim")
    assert off.reasoning is None
    stored_on = split_reasoning(on.content, on.reasoning, thinking, version)
    stored_off = split_reasoning(off.content, off.reasoning, thinking, version)
    assert stored_on == stored_off == split_reasoning(raw, None, thinking, version)
