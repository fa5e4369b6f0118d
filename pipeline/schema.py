"""The one Arrow schema shared by every writer and reader of a RUN_DIR.

Shards hold accepted rows; rejects hold the same columns plus `reason` and `detail`. The schema is explicit so a
late `None` never fails a write after the GPU work is done. `keep_fields` columns are strings (non-string input
values are JSON-encoded), so one input file with mixed types still writes.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from .records import BadInput, Completion, Prompt, Turn

SCHEMA_VERSION = 3  # 2: `turns` and `source_id` (conversations); 3: acceptance and repetition per turn

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])
TURN_TYPE = pa.struct(
    [
        ("reasoning", pa.string()),
        ("answer", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("reasoning_tokens", pa.int32()),
        ("endpoint", pa.string()),
        ("latency_s", pa.float32()),
        ("attempts", pa.int16()),
        ("spec_accept_length", pa.float32()),  # the server's speculative acceptance on this turn (null: none)
        ("spec_verify_ct", pa.int32()),
        ("repetition_chars", pa.int32()),  # the first verbatim repeating run's characters (pipeline/loops.py)
    ]
)

# records.Turn's fields, in order; each is also a top-level column of the same type
TURN_KEYS: tuple[str, ...] = tuple(f.name for f in TURN_TYPE)
_turn_values = operator.itemgetter(*TURN_KEYS)

BASE_FIELDS: list[pa.Field] = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("messages", pa.list_(MESSAGE_TYPE)),
    pa.field("reasoning", pa.string()),
    pa.field("answer", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("reasoning_tokens", pa.int32()),
    pa.field("model", pa.string()),
    pa.field("endpoint", pa.string()),
    pa.field("attempts", pa.int16()),
    pa.field("latency_s", pa.float32()),
    pa.field("seed", pa.int64()),
    pa.field("created_at", pa.timestamp("us", tz="UTC")),
    pa.field("spec_accept_length", pa.float32()),
    pa.field("spec_verify_ct", pa.int32()),
    pa.field("repetition_chars", pa.int32()),
    pa.field("turns", pa.list_(TURN_TYPE)),  # every generated assistant turn, in order; the last is the row's own
    pa.field("source_id", pa.string()),  # the input id when generation.samples > 1, else null
    pa.field("tools", pa.string()),  # the row's tools as sent (a JSON list), null when it has none
    # Parallel to `messages`: each message's keys beyond role and content as a JSON object (an assistant's
    # `tool_calls`, a tool result's `tool_call_id`/`name`), null for the others; null when no message has any.
    pa.field("message_extras", pa.list_(pa.string())),
    pa.field("input_fingerprint", pa.string()),  # the conversation as read; the repaired export checks it
]
# records.Completion's fields that are columns too (they describe the row's own turn, its last), in column order
_COMPLETION_FIELDS = {f.name for f in dataclasses.fields(Completion)}
COMPLETION_COLUMNS: tuple[str, ...] = tuple(f.name for f in BASE_FIELDS if f.name in _COMPLETION_FIELDS)
REJECT_FIELDS: list[pa.Field] = [pa.field("reason", pa.string()), pa.field("detail", pa.string())]

# Reason codes in order of precedence (DESIGN.md section 5).
REASONS: tuple[str, ...] = (
    "bad_input",
    "http_4xx",
    "context_length",  # the prompt (with max_tokens) does not fit the server's context: rejected once, not retried
    "truncated",
    "tool_call",  # a regenerated text turn called a tool instead of answering (issue 27)
    "unfinished",  # a finish_reason other than stop/length: the generation ended before the model finished it
    "empty_response",
    "answer_in_reasoning",
    "think_marker",
    "looping",  # the reasoning or the answer falls into verbatim repetition (pipeline/loops.py)
    "empty_answer",
    "empty_reasoning",
    "degenerate_repetition",
    "exhausted_retries",
    "unstorable_row",  # the store could not write the row with the schema (pipeline/store/shards.py)
)


def shard_schema(keep_fields: Sequence[str] = ()) -> pa.Schema:
    extra = [pa.field(name, pa.string()) for name in keep_fields]
    return pa.schema(BASE_FIELDS + extra, metadata={"regen_schema_version": str(SCHEMA_VERSION)})


def reject_schema(keep_fields: Sequence[str] = ()) -> pa.Schema:
    extra = [pa.field(name, pa.string()) for name in keep_fields]
    return pa.schema(BASE_FIELDS + REJECT_FIELDS + extra, metadata={"regen_schema_version": str(SCHEMA_VERSION)})


def stringify(value: Any) -> str | None:
    """How a keep_field value is stored: strings as they are, everything else as JSON."""
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def tool_columns(prompt: Prompt) -> dict[str, Any]:
    """`tools` and `message_extras` of a row (both null for a conversation without tools): the messages column
    holds role and content only, so what a tool conversation adds rides beside it."""
    extras = [{k: v for k, v in m.items() if k not in _PLAIN} for m in prompt.messages]
    return {
        "tools": orjson.dumps(list(prompt.tools)).decode() if prompt.tools else None,
        "message_extras": [orjson.dumps(e).decode() if e else None for e in extras] if any(extras) else None,
    }


_PLAIN = frozenset({"role", "content", "reasoning_content"})  # what `message_extras` leaves out


def _now_us() -> int:
    return time.time_ns() // 1000


def turn_row(turn: Turn) -> dict[str, Any]:
    """One element of the `turns` column, as the journal and the Parquet writer take it (keys in TURN_KEYS order)."""
    return {key: getattr(turn, key) for key in TURN_KEYS}


def turn_of(entry: Mapping[str, Any]) -> Turn:
    """A `turns` element read back (a journaled turn); a key it lacks reads as null, the answer as ""."""
    return Turn(**{key: _field(entry, key) for key in TURN_KEYS})


def completion_of(row: Mapping[str, Any]) -> Completion:
    """A stored row's own (last) turn as the Completion it was made from, near enough to validate again: the
    COMPLETION_COLUMNS it holds; a column it lacks reads as null, the answer as ""."""
    return Completion(**{name: _field(row, name) for name in COMPLETION_COLUMNS})


def _field(row: Mapping[str, Any], name: str) -> Any:
    """A column's value as its record field takes it: null (or missing) where the field takes no null reads as the
    field's empty value."""
    value = row.get(name)
    return (value or _EMPTY[name]) if name in _EMPTY else value


# The record fields that take no null, with the value a null (or missing) column reads as.
_EMPTY: dict[str, Any] = {
    "answer": "",
    "finish_reason": "",
    "model": "",
    "endpoint": "",
    "latency_s": 0.0,
    "seed": 0,
    "attempts": 0,
}


def accepted_row(
    prompt: Prompt, completion: Completion, attempts: int, turns: Sequence[Turn] | None = None
) -> dict[str, Any]:
    """The shard row for an accepted completion; keys are schema column names. `prompt.messages` are the messages
    sent for the last turn; `turns` every generated turn (default: this completion alone)."""
    return {
        "id": prompt.id,
        "messages": list(prompt.messages),
        "reasoning": completion.reasoning,
        "answer": completion.answer,
        "finish_reason": completion.finish_reason,
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "reasoning_tokens": completion.reasoning_tokens,
        "model": completion.model,
        "endpoint": completion.endpoint,
        "attempts": attempts,
        "latency_s": completion.latency_s,
        "seed": completion.seed,
        "created_at": _now_us(),
        "spec_accept_length": completion.spec_accept_length,
        "spec_verify_ct": completion.spec_verify_ct,
        "repetition_chars": completion.repetition_chars,
        "turns": [turn_row(t) for t in turns] if turns is not None else [turn_row(Turn.of(completion, attempts))],
        "source_id": prompt.source_id,
        "input_fingerprint": prompt.fingerprint,
        **tool_columns(prompt),
        **prompt.extra,
    }


def rejected_row(
    prompt: Prompt,
    completion: Completion | None,
    attempts: int,
    reason: str,
    detail: str,
    turns: Sequence[Turn] = (),
) -> dict[str, Any]:
    """The reject row: the last completion seen (if any), plus why it was rejected. `turns` are the turns that
    were accepted before the one that failed; the failed completion (if any) is appended to them."""
    if completion is None:
        row: dict[str, Any] = {"id": prompt.id, "messages": list(prompt.messages), "attempts": attempts}
        row["created_at"] = _now_us()
        row["turns"] = [turn_row(t) for t in turns] or None
        row["source_id"] = prompt.source_id
        row["input_fingerprint"] = prompt.fingerprint
        row.update(tool_columns(prompt))
        row.update(prompt.extra)
    else:
        row = accepted_row(prompt, completion, attempts, [*turns, Turn.of(completion, attempts)])
    row["reason"] = reason
    row["detail"] = detail
    return row


def bad_input_row(bad: BadInput) -> dict[str, Any]:
    return {
        "id": bad.id,
        "attempts": 0,
        "created_at": _now_us(),
        "reason": "bad_input",
        "detail": f"{bad.source}: {bad.detail}",
        "source_id": bad.source_id,
        **bad.extra,
    }


def own_turn_only(row: Mapping[str, Any]) -> bool:
    """The row's `turns` is its one generated turn, equal to its top-level columns (every single-turn row): the
    store then converts and journals that text once, not twice."""
    turns = row.get("turns")
    if not turns or len(turns) != 1:
        return False
    turn = turns[0]
    try:
        return bool(_turn_values(turn) == _turn_values(row))  # every key present: one C call, not nine lookups
    except (KeyError, TypeError):
        return all(turn.get(k) == row.get(k) for k in TURN_KEYS)  # a key missing on either side reads as null


def own_turn(row: Mapping[str, Any]) -> dict[str, Any]:
    """The `turns` entry of a row whose only turn is its own (see own_turn_only)."""
    return {k: row.get(k) for k in TURN_KEYS}


def to_table(rows: Iterable[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts keyed by column; missing keys are null) to a table of exactly `schema`.

    Where every row's only turn is its own, `turns` is built from the top-level columns without a copy: the
    reasoning text is converted once per row, not twice (`scripts/bench.py --only overhead`: ~1/8 of a run's CPU
    was this conversion)."""
    rows = list(rows)
    shared_turns = "turns" in schema.names and bool(rows) and all(own_turn_only(row) for row in rows)
    # pa.array per column, not Table.from_pydict: the latter imports pandas (~1 s and ~60 MB of RSS).
    columns = {
        f.name: _array([row.get(f.name) for row in rows], f.type)
        for f in schema
        if not (shared_turns and f.name == "turns")
    }
    if shared_turns:
        turn = pa.StructArray.from_arrays([columns[k] for k in TURN_KEYS], fields=list(TURN_TYPE))
        offsets = pa.array(np.arange(len(rows) + 1, dtype=np.int32))
        columns["turns"] = pa.ListArray.from_arrays(offsets, turn, type=schema.field("turns").type)
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)


_MAX_STRING_BYTES = 2**31 - 1  # int32 offsets of pa.string()


def _array(values: list[Any], dtype: pa.DataType) -> pa.Array:
    """pa.array, but on the system allocator a string column of Python str is built from one joined buffer:
    Arrow's own conversion grows its data buffer a value at a time, and there each growth is a copy (~2-4x the
    encode and join of 7 KB texts). On jemalloc (a run's pool on Linux, engine/memory.py) it grows in place and
    Arrow's conversion is the faster: one copy of each text instead of two (a run's row groups 0.27 -> 0.21 CPU-s
    per 20,000 rows)."""
    system = pa.default_memory_pool().backend_name == "system"
    if dtype != pa.string() or not values or not system or not all(type(value) is str for value in values):
        return pa.array(values, type=dtype)
    try:
        encoded = [value.encode() for value in values]
    except UnicodeEncodeError:  # a lone surrogate: Arrow's own error, which the store knows how to handle
        return pa.array(values, type=dtype)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    if int(lengths.sum()) > _MAX_STRING_BYTES:
        return pa.array(values, type=dtype)
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))
