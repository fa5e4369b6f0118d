"""What a dataset already holds: each row's id, and the assistant turns it stores split into reasoning and answer.

`regen audit`, `input.select = "invalid"` and the repaired export judge and rewrite rows as users' files hold them,
so they share one reading of a stored assistant message:

- reasoning in a field of the message (`reasoning_content`, `reasoning` or `thinking`, the first one holding a
  string), the answer in `content`/`value`;
- or inline: `<think>reasoning</think>answer` inside the content (a leading `</think>` alone, as templates that put
  `<think>` in the prompt leave it, counts too); a `<think>` that never closes is a turn cut off mid-reasoning
  (truncated), its text all reasoning;
- or neither: the content is all answer.

A row's id is inputs/ids.py's rule, the same for the reader, the audit and the repaired export.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .. import conversation
from ..records import Completion
from ..validator import STORED
from .input_files import Row, arrow_rows, json_array_rows, jsonl_rows, parquet_rows

REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")
INLINE = "inline"  # the style of a turn whose reasoning sits in <think>...</think> inside the content
PARTS = "parts"  # ... whose content is a list of parts, its reasoning a `reasoning` part (LLaMA-Factory's v1 shape)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One assistant turn as the row stores it. `position` indexes the conversation (`len(messages)` for the
    missing answer after a trailing user turn); `style` is where its reasoning lives: a field name, INLINE, or ""."""

    position: int
    reasoning: str | None
    answer: str
    truncated: bool = False
    style: str = ""
    missing: bool = False

    def completion(self) -> Completion:
        """The turn as the validators see a completion: an unterminated `<think>` is finish_reason `length`; any
        other is `validator.STORED` (how it ended is not stored: one that ends in its loop ran to the limit)."""
        return Completion(self.reasoning, self.answer, "length" if self.truncated else STORED)


def fingerprint(messages: Sequence[Mapping[str, Any]], positions: Sequence[int]) -> str:
    """What the run answered for a row, so the repaired export pastes only where the row still asks it: 16 hex
    digits of sha256 over the conversation as read minus the turns to generate (the system, user and kept turns,
    with where the generated ones go), then 16 over the stored text of those turns (what the run replaced)."""
    at = set(positions)
    kept = [positions, [m for i, m in enumerate(messages) if i not in at]]
    replaced = [m for i, m in enumerate(messages) if i in at]
    return _digest(kept) + (_digest(replaced) if replaced else _NOTHING_REPLACED)  # a new turn replaces nothing


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


_NOTHING_REPLACED = _digest([])


def with_system(messages: tuple[conversation.Message, ...], system: str) -> tuple[conversation.Message, ...]:
    """`input.system_prompt` first, unless the conversation has its own system message (part of a hashed id)."""
    if not system or any(m["role"] == "system" for m in messages):
        return messages
    return ({"role": "system", "content": system}, *messages)


def split_inline(text: str) -> tuple[str | None, str, bool]:
    """(reasoning or None, answer, truncated) of content that may carry `<think>...</think>`, both sides stripped."""
    head, opened, rest = text.partition(THINK_OPEN)
    if not opened:
        reasoning, closed, tail = text.partition(THINK_CLOSE)
        return (reasoning.strip() or None, tail.strip(), False) if closed else (None, text.strip(), False)
    reasoning, closed, tail = rest.partition(THINK_CLOSE)
    if not closed:
        return reasoning.strip() or None, head.strip(), True
    return reasoning.strip() or None, (head + tail).strip(), False


def split_message(
    raw: Mapping[str, Any], content: str, parts_reasoning: str | None = None
) -> tuple[str | None, str, bool, str]:
    """(reasoning, answer, truncated, style) of one stored assistant message; `content` is its parsed text and
    `parts_reasoning` the text of its `reasoning` parts, when its content is a list of parts (style PARTS)."""
    if isinstance(raw.get("content", raw.get("value")), list):
        return (parts_reasoning or "").strip() or None, content.strip(), False, PARTS
    named = ""
    for name in REASONING_FIELDS:
        if name in raw:
            named = named or name
            if isinstance(raw[name], str):
                return raw[name].strip() or None, content.strip(), False, name
    if THINK_OPEN in content or THINK_CLOSE in content:
        return (*split_inline(content), INLINE)
    return None, content.strip(), False, named


def stored_turns(raw: Sequence[Any], messages: Sequence[conversation.Message]) -> list[StoredTurn]:
    """Every assistant turn regen would generate for this conversation (`turns = "all"`), as the row stores it.
    `raw` is the conversation as read, `messages` its `conversations.parse`; ConversationError on a bad order."""
    turns = []
    for position in conversation.turn_positions(messages, "all"):
        if position == len(messages):
            turns.append(StoredTurn(position, None, "", missing=True))
            continue
        message = messages[position]
        reasoning, answer, truncated, style = split_message(
            raw[position], message["content"], message.get("reasoning_content")
        )
        turns.append(StoredTurn(position, reasoning, answer, truncated, style))
    return turns


def read_chunks(kinds: Mapping[Path, str], columns: list[str], size: int) -> Iterator[tuple[Path, list[Row]]]:
    """Rows of every input file in reading order, `size` at a time, with every column of `columns` there is."""
    for path, kind in kinds.items():
        if kind == "jsonl":
            yield from ((path, rows) for rows in jsonl_rows(path, size))
        elif kind == "json":
            yield from ((path, rows) for rows in json_array_rows(path, size))
        elif kind == "parquet":
            yield from ((path, rows) for rows in parquet_rows(path, columns, size, None))
        else:
            yield from ((path, rows) for rows in arrow_rows(path, columns, size, None))
