"""What a dataset looks like from its first rows: the fields, the conversation's shape, what regen can read of it.

`sniff(path)` reads at most `rows` rows (every column) and tallies what `regen init` writes a config from and what
a run's refusal names a fix from: which field holds the conversation (`messages` or ShareGPT `conversations`, the
field `messages_field = "auto"` finds), the roles and content-part types, a tools column, images, ids (the field,
repeats), and the audit's own verdict on each row's stored assistant turns (`audit_row`: broken turns, rows it
cannot read). Nothing here decides; it counts.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .. import conversation
from .input_files import Broken, resolve
from .row_audit import AuditOptions, audit_row
from .stored import read_chunks

SNIFF_ROWS = 1000
ID_FIELDS = ("id", "uuid", "_id", "conversation_id", "question_id", "sample_id", "custom_id")
PROMPT_FIELDS = ("prompt", "instruction", "question", "input", "query")
IMAGE_FIELDS = ("images", "image", "videos", "audios")


@dataclass
class Shape:
    """The tallies of the first `rows` rows of a dataset."""

    files: list[Path]
    rows: int = 0
    fields: Counter[str] = field(default_factory=Counter)  # column -> rows that have it (not null)
    conversation_fields: Counter[str] = field(default_factory=Counter)  # messages / conversations -> rows
    roles: Counter[str] = field(default_factory=Counter)  # role (or ShareGPT `from`) -> messages
    part_types: Counter[str] = field(default_factory=Counter)  # a list content's part `type` -> parts
    part_keys: Counter[str] = field(default_factory=Counter)  # the keys of those parts, e.g. text, value
    image_rows: int = 0  # rows with an images column, an image part or an <image> placeholder
    ids: Counter[str] = field(default_factory=Counter)  # id value -> rows (only with an id field)
    id_field: str | None = None
    failing_rows: int = 0  # rows whose stored assistant turns fail the audit
    unreadable: Counter[str] = field(default_factory=Counter)  # why a row cannot be read -> rows
    by_reason: Counter[str] = field(default_factory=Counter)  # failing turns' reason codes -> rows

    @property
    def conversation_field(self) -> str | None:
        return self.conversation_fields.most_common(1)[0][0] if self.conversation_fields else None

    @property
    def prompt_field(self) -> str | None:
        return next((f for f in PROMPT_FIELDS if self.fields[f]), None)

    @property
    def duplicate_ids(self) -> int:
        return sum(n - 1 for n in self.ids.values() if n > 1)

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
    shape = Shape(files)
    id_field = _id_field(data)
    shape.id_field = id_field
    opts = AuditOptions(id_field=id_field or "id", thinking=thinking)
    for row in data:
        shape.rows += 1
        if isinstance(row, Broken) or not isinstance(row, dict):
            shape.unreadable[row.detail if isinstance(row, Broken) else "not a JSON object"] += 1
            continue
        _tally_row(shape, row)
        if id_field and isinstance(row.get(id_field), str | int):
            shape.ids[str(row[id_field])] += 1
        elif not id_field and (found := conversation.find_conversation(row, "auto")) is not None:
            raw = orjson.dumps(found[1], option=orjson.OPT_SORT_KEYS)
            shape.ids[hashlib.blake2b(raw, digest_size=16).hexdigest()] += 1  # the repeats of a content id
        verdict = audit_row(row, opts)
        if verdict.bad:
            shape.unreadable[verdict.bad] += 1
        elif verdict.failing:
            shape.failing_rows += 1
            shape.by_reason.update(verdict.reasons())
    return shape


def _id_field(data: list[Any]) -> str | None:
    dicts = [row for row in data if isinstance(row, dict)]
    return next((f for f in ID_FIELDS if dicts and all(row.get(f) is not None for row in dicts)), None)


def _tally_row(shape: Shape, row: dict[str, Any]) -> None:
    shape.fields.update(k for k, v in row.items() if v is not None)
    found = conversation.find_conversation(row, "auto")
    images = any(row.get(f) for f in IMAGE_FIELDS)
    if found is not None:
        shape.conversation_fields[found[0]] += 1
        for message in found[1] if isinstance(found[1], list) else ():
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
    shape.image_rows += images
