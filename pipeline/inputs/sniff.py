"""What a dataset looks like from its first rows: the fields, the conversation's shape, what regen can read of it.

`sniff(path)` reads at most `rows` rows (every column) and tallies what `regen init` writes a config from and what
a run's refusal names a fix from: which field holds the conversation (`messages` or ShareGPT `conversations`, the
field `messages_field = "auto"` finds) or OpenAI Batch request lines (`{custom_id, method, url, body}`, read as
`input.format = "openai-batch"`), the roles and content-part types, a tools column, images, and the audit's own
verdict on each row's stored assistant turns (`audit_row`: broken turns). What a run makes of the rows, the ids it
gives them (their repeats) and the rows it refuses as bad_input, comes from the run's own reader with the `[input]`
these tallies suggest, so `regen init` counts what `regen run` will. Nothing here decides; it counts.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import InputConfig
from ..records import BadInput
from . import conversations
from .input_files import resolve
from .reader import PromptReader
from .row_audit import AuditOptions, audit_row
from .stored import read_chunks

SNIFF_ROWS = 1000
ID_FIELDS = ("id", "uuid", "_id", "conversation_id", "question_id", "sample_id", "custom_id")
PROMPT_FIELDS = ("prompt", "instruction", "question", "input", "query")
IMAGE_FIELDS = ("images", "image", "videos", "audios")
BATCH_KEYS = frozenset({"custom_id", "method", "url", "body"})  # an OpenAI Batch input line


@dataclass
class Shape:
    """The tallies of the first `rows` rows of a dataset."""

    files: list[Path]
    rows: int = 0
    format: str = "auto"  # "openai-batch" when the rows are OpenAI Batch request lines
    fields: Counter[str] = field(default_factory=Counter)  # column -> rows that have it (not null)
    conversation_fields: Counter[str] = field(default_factory=Counter)  # messages / conversations -> rows
    roles: Counter[str] = field(default_factory=Counter)  # role (or ShareGPT `from`) -> messages
    part_types: Counter[str] = field(default_factory=Counter)  # a list content's part `type` -> parts
    part_keys: Counter[str] = field(default_factory=Counter)  # the keys of those parts, e.g. text, value
    image_rows: int = 0  # rows with an images column, an image part or an <image> placeholder
    ids: Counter[str] = field(default_factory=Counter)  # the id a run gives each row -> rows
    id_field: str | None = None
    failing_rows: int = 0  # rows whose stored assistant turns fail the audit
    answered_rows: int = 0  # rows that store at least one assistant turn (not only prompts)
    unreadable: Counter[str] = field(default_factory=Counter)  # why a run refuses a row (bad_input) -> rows
    body_fields: Counter[str] = field(default_factory=Counter)  # openai-batch: body keys besides messages -> rows
    by_reason: Counter[str] = field(default_factory=Counter)  # failing turns' reason codes -> rows

    @property
    def conversation_field(self) -> str | None:
        return self.conversation_fields.most_common(1)[0][0] if self.conversation_fields else None

    @property
    def prompt_field(self) -> str | None:
        return next((f for f in PROMPT_FIELDS if self.fields[f]), None)

    @property
    def duplicate_ids(self) -> int:
        """Rows that repeat an earlier row's id: those `input.dedupe` skips (the run's own count)."""
        return sum(n - 1 for n in self.ids.values() if n > 1)

    @property
    def readable(self) -> int:
        return self.rows - sum(self.unreadable.values())

    def input_config(self, path: str) -> InputConfig:
        """The `[input]` these tallies suggest for `path` (what `regen init` writes)."""
        if self.format == "openai-batch":
            return InputConfig(path=path, format=self.format)
        return InputConfig(path=path, id_field=self.id_field or "id", prompt_field=self.prompt_field or "prompt")

    @property
    def tools(self) -> bool:
        return bool(self.fields["tools"]) or bool({"function_call", "observation", "tool"} & set(self.roles))


def first_rows(path: str, rows: int = SNIFF_ROWS, fmt: str = "auto") -> tuple[list[Path], list[Any]]:
    """The input files and up to `rows` of their first rows, every column, as the reader parses them."""
    kinds = resolve(path, fmt)
    got: Iterator[Any] = itertools.chain.from_iterable(
        (data for _, data in chunk) for _, chunk in read_chunks(kinds, [], min(rows, 1024))
    )
    return list(kinds), list(itertools.islice(got, rows))


def sniff(path: str, rows: int = SNIFF_ROWS, *, thinking: bool = True) -> Shape:
    files, data = first_rows(path, rows)
    shape = Shape(files, rows=len(data))
    dicts = [row for row in data if isinstance(row, dict)]
    if dicts and sum(_is_batch_line(row) for row in dicts) * 2 > len(dicts):
        shape.format = "openai-batch"
    shape.id_field = "custom_id" if shape.format == "openai-batch" else _id_field(dicts)
    opts = AuditOptions(id_field=shape.id_field or "id", thinking=thinking)
    for row in dicts:
        if shape.format == "openai-batch":
            if _is_batch_line(row):
                _tally_batch_line(shape, row)
            continue  # a request stores no answer to judge
        _tally_row(shape, row)
        verdict = audit_row(row, opts)
        shape.answered_rows += any(not turn.missing for turn, _ in verdict.turns)
        if verdict.failing and not verdict.bad:
            shape.failing_rows += 1
            shape.by_reason.update(verdict.reasons())
    _tally_run_view(shape, path, len(data))
    return shape


def _tally_run_view(shape: Shape, path: str, rows: int) -> None:
    """The ids `regen run` gives the first `rows` rows, and the rows it refuses, by its own reader."""
    reader = PromptReader(shape.input_config(path))
    for item in itertools.islice(itertools.chain.from_iterable(reader.iter_batches()), rows):
        shape.ids[item.id] += 1
        if isinstance(item, BadInput):
            shape.unreadable[item.detail] += 1


def _is_batch_line(row: dict[str, Any]) -> bool:
    return BATCH_KEYS <= row.keys() and isinstance(row.get("body"), dict)


def _tally_batch_line(shape: Shape, row: dict[str, Any]) -> None:
    body: dict[str, Any] = row["body"]  # a dict: _is_batch_line
    shape.fields.update(k for k, v in row.items() if v is not None and k != "body")
    shape.body_fields.update(k for k, v in body.items() if v is not None and k != "messages")
    if body.get("tools"):
        shape.fields["tools"] += 1
    if body.get("messages") is not None:
        shape.conversation_fields["body.messages"] += 1
        _tally_messages(shape, body["messages"], images=False)


def _id_field(dicts: list[dict[str, Any]]) -> str | None:
    return next((f for f in ID_FIELDS if dicts and all(row.get(f) is not None for row in dicts)), None)


def _tally_row(shape: Shape, row: dict[str, Any]) -> None:
    shape.fields.update(k for k, v in row.items() if v is not None)
    found = conversations.find_conversation(row, "auto")
    images = any(row.get(f) for f in IMAGE_FIELDS)
    if found is not None:
        shape.conversation_fields[found[0]] += 1
        images = _tally_messages(shape, found[1], images=images)
    shape.image_rows += images


def _tally_messages(shape: Shape, messages: Any, *, images: bool) -> bool:
    """Count the roles and content parts of one conversation; whether it (or `images`) carries an image."""
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        shape.roles[str(message.get("role", message.get("from")))] += 1
        content = message.get("content", message.get("value"))
        if isinstance(content, str) and "<image>" in content:
            images = True
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict):
                shape.part_types[str(part.get("type"))] += 1
                shape.part_keys.update(k for k in part if k != "type")
                images = images or part.get("type") in ("image_url", "image")
    return images
