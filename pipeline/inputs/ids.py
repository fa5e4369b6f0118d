"""A row's id: the one rule the reader, `regen audit` and the repaired export share.

A row's own id is its id field (`input.id_field`, `custom_id` in an OpenAI batch file) as a string: a non-empty
string or an integer (a boolean is not one here, nor a float), one line of text (`id_problem`: no control
character). A row has none when the field is absent, or null in a Parquet or Arrow column (a column cannot tell a
missing value from a null); such a row is named by `content_id` of its final messages. A JSON row that says
`"id": null`, or holds a value that cannot be an id, raises `IdProblem`: the reader makes it `bad_input`, and the
audit and the repaired export, which must name rows as the run named them, read it as having no usable id
(`usable_id`), so a refused row is never matched to another row's result.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..conversation import Message
from .conversations import short, type_name

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class IdProblem(ValueError):
    """Why a row's id field cannot be its id; the message names the field."""


def given_id(data: Mapping[str, Any], field: str, *, json_row: bool = False, required: bool = False) -> str | None:
    """The row's own id; None when it has none. `json_row`: the row is a JSON object, where a null field was
    written on purpose (an id meant to be there), so it is an IdProblem rather than no id. `required`: a row
    without the field is an IdProblem (`custom_id` of an OpenAI batch line)."""
    value = data.get(field)
    if value is None:
        if required:
            raise IdProblem(f"missing {field}")
        if json_row and field in data:
            raise IdProblem(f"{field} is null; give the row an id, or leave the field out to use a content hash")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise IdProblem(f"{field} must be a string or an integer, got {type_name(value)} {short(value)}")
    if not str(value).strip():
        raise IdProblem(f"{field} is empty")
    problem = id_problem(str(value))
    if problem is not None:
        raise IdProblem(f"{field}: {problem}")
    return str(value)


def usable_id(data: Mapping[str, Any], field: str, *, json_row: bool = False) -> str | None:
    """`given_id`, or None where it raises: the id the run gave this row, when the row names itself."""
    try:
        return given_id(data, field, json_row=json_row)
    except IdProblem:
        return None


def id_problem(value: str) -> str | None:
    """Why `value` cannot be a row id, or None. An id is one line: a newline, CR, NUL or any other control
    character would split an id list (`audit --ids-out`, `run --only-ids`) or a log line in two."""
    found = _CONTROL.search(value)
    if found is None:
        return None
    return f"id {value!r} holds a control character ({found[0]!r} at {found.start()}); ids must be one line of text"


def content_id(messages: Sequence[Mapping[str, str]]) -> str:
    """The id of a row that has none: sha256 of the canonical JSON of its final messages, first 16 hex digits."""
    blob = orjson.dumps(list(messages), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()[:16]


def hashed(messages: Sequence[Message], tools: Sequence[Message]) -> Sequence[Message]:
    """What a row's content id covers: its messages, and its tools when it has any (two rows that differ only in
    their tools are two prompts)."""
    return messages if not tools else (*messages, {"tools": list(tools)})
