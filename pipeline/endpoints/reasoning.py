"""Reasoning and answer of one completion, judged the same whether or not the server ran a reasoning parser.

With `--reasoning-parser qwen3` SGLang splits the output itself; without one, `content` holds the raw text with its
`<think>`/`</think>` markers and regen splits it here, by the rules of the `qwen3` parser of the server's release
(`python/sglang/srt/parser/reasoning_parser.py`, `Qwen3Detector` / `BaseReasoningFormatDetector.detect_and_parse`;
force mode from `entrypoints/openai/serving_chat.py::_get_reasoning_from_request`):

- a thinking request starts inside the reasoning (force mode): output with no `</think>` is all reasoning, whether
  it stopped or was cut off; with thinking off, only an output that contains `<think>` is split;
- 0.5.9-0.5.12 delete every `<think>` in the text; from 0.5.14 only the ones at its very start;
- from 0.5.14 a `<tool_call>` in unclosed reasoning closes it there (the tool call goes to the answer).

Both sides are stripped of surrounding whitespace (SGLang strips up to 0.5.12 and not after), and an empty
reasoning is None, so the stored row is the same either way.
"""

from __future__ import annotations

from ..sglang.releases import THINK_TAG_ONLY_AT_START, TOOL_CALL_CLOSES_REASONING, Release

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TOOL_CALL = "<tool_call>"


def split_reasoning(
    content: str, reasoning: str | None, thinking: bool, version: str | None = None
) -> tuple[str | None, str]:
    """(reasoning, answer) of a completion. `reasoning` is the server's `reasoning_content` (None: no parser ran, so
    `content` is raw text to split here, as the `qwen3` parser of SGLang `version` would; None: the newest)."""
    if reasoning is not None:
        return reasoning.strip() or None, content.strip()
    head, tail = qwen3_split(content, force=thinking, version=version)
    return (head.strip() or None) if head is not None else None, tail.strip()


def qwen3_split(text: str, *, force: bool, version: str | None = None) -> tuple[str | None, str]:
    """(reasoning or None, normal text) of raw output `text` under SGLang `version`'s qwen3 parser, unstripped."""
    if not force and THINK_OPEN not in text:
        return None, text
    v = Release.of(version)
    if v < THINK_TAG_ONLY_AT_START:
        body = text.replace(THINK_OPEN, "")
    else:
        body = text
        while body.startswith(THINK_OPEN):
            body = body[len(THINK_OPEN) :]
    head, sep, tail = body.partition(THINK_CLOSE)
    if sep:
        return head, tail
    if v >= TOOL_CALL_CLOSES_REASONING and TOOL_CALL in body:
        at = body.index(TOOL_CALL)
        return body[:at], body[at:]
    return body, ""
