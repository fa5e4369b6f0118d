"""Export formats: each turns a batch of shard rows into rows of one training shape, with one explicit schema.

| format | one row per | body columns |
|---|---|---|
| `chat` | conversation (or generated turn) | `messages` [{role, content, reasoning_content?}] |
| `sharegpt` | conversation (or generated turn) | `conversations` [{from, value, reasoning_content?}] |
| `specforge` | conversation (or generated turn) | `status`, `conversations` (SpecForge's regenerated shape) |
| `prompt-completion` | last turn (or generated turn) | `prompt`, `completion` (TRL's conversational shape) |
| `openai-batch-output` | request (the samples of one row are one line) | `custom_id`, `response`, `error` |

Every conversation row also has `regenerated` (one boolean per message: whether regen generated that assistant turn,
so a trainer can mask the turns kept as given). A run with tool conversations (issue 27) adds `tool_calls` and
`tool_call_id` to chat messages (OpenAI's shape, as TRL and SpecForge's parser read it), `function_call` /
`observation` turns to ShareGPT, and a `tools` column (the row's tools as a JSON string, which TRL's SFT trainer and
SpecForge's preprocessing both parse).

`expand_turns` gives one row per generated assistant turn (`<id>#turn<k>`, the history without reasoning, the
turn with it). A format may skip rows its consumer would refuse (SpecForge's rules); `skipped` counts them by why.
The tokenized format lives in tokenized.py and follows the same protocol.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa

from ..errors import ConfigError, InputError
from ..schema import REJECT_FIELDS
from .shapes import (
    Message,
    Style,
    Target,
    conversation,
    specforge_message,
    specforge_problem,
    targets,
)

Row = dict[str, Any]

METADATA_FIELDS = [
    pa.field("id", pa.string()),
    pa.field("model", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("reasoning_tokens", pa.int32()),
    pa.field("seed", pa.int64()),
]
_TURN_METADATA = ("finish_reason", "prompt_tokens", "completion_tokens", "reasoning_tokens")
_EXPANDED_FIELDS = [pa.field("source_id", pa.string()), pa.field("assistant_turn_index", pa.int32())]


class Format(Protocol):
    skipped: Counter[str]

    def schema(self, keep_fields: list[str], *, rejects: bool) -> pa.Schema | None: ...

    def rows(self, batch: list[Row]) -> list[Row]: ...


TOOL_CALL_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)


def message_type(style: Style, *, sharegpt: bool = False) -> pa.DataType:
    names = ("from", "value") if sharegpt else ("role", "content")
    fields: list[tuple[str, pa.DataType]] = [(n, pa.string()) for n in names]
    if style.reasoning == "field":
        fields.append(("reasoning_content", pa.string()))
    if style.tools and not sharegpt:
        fields += [("tool_calls", pa.list_(TOOL_CALL_TYPE)), ("tool_call_id", pa.string())]
    return pa.struct(fields)


class Converter:
    """chat, sharegpt, specforge and prompt-completion: the conversation of each row (or each generated turn)."""

    def __init__(self, format: str, style: Style, *, expand_turns: bool = False, thinking: bool = True) -> None:
        if format == "specforge" and style.reasoning != "field":
            raise ConfigError("--format specforge carries reasoning as reasoning_content: use --reasoning field")
        self.format, self.style, self.expand = format, style, expand_turns
        self.thinking = thinking
        self.skipped: Counter[str] = Counter()
        self._keep: list[str] = []
        self._rejects = False
        self._written = 0  # conversation rows written so far: SpecForge's `source_row_index`

    def schema(self, keep_fields: list[str], *, rejects: bool) -> pa.Schema | None:
        self._keep, self._rejects = keep_fields, rejects
        if self.format == "specforge":
            return None  # JSONL whose assistant messages alone carry reasoning_content, as SpecForge writes them
        flags = [pa.field("regenerated", pa.list_(pa.bool_()))]
        if self.format == "prompt-completion":
            prompt_type = pa.list_(message_type(Style("none", tools=self.style.tools)))
            body = [pa.field("prompt", prompt_type), pa.field("completion", pa.list_(message_type(self.style)))]
        elif self.format == "sharegpt":
            body = [pa.field("conversations", pa.list_(message_type(self.style, sharegpt=True))), *flags]
        else:
            body = [pa.field("messages", pa.list_(message_type(self.style))), *flags]
        if self.style.tools:
            body.append(pa.field("tools", pa.string()))
        extra = [pa.field(name, pa.string()) for name in keep_fields]
        expanded = _EXPANDED_FIELDS if self.expand else []
        head, tail = METADATA_FIELDS[0], METADATA_FIELDS[1:]
        return pa.schema([head, *body, *expanded, *tail, *(REJECT_FIELDS if rejects else ()), *extra])

    def rows(self, batch: list[Row]) -> list[Row]:
        out: list[Row] = []
        for row in batch:
            out += self._convert(row)
        return out

    def _convert(self, row: Row) -> list[Row]:
        conv = conversation(row)
        if self.format == "specforge":
            return self._specforge(row, conv)
        if not self.expand:
            if self.format == "prompt-completion":
                found = targets(conv)
                if not found:
                    self.skipped["no_generated_turn"] += 1
                    return []
                return [{**self._metadata(row), **self._prompt_completion(found[-1]), **self._tools(row)}]
            return [{**self._metadata(row), **self._body(conv), **self._tools(row)}]
        out = []
        for target in targets(conv):
            if self.format == "prompt-completion":
                body = self._prompt_completion(target)
            else:
                body = self._body((*target.history, target.turn))
            out.append({**self._metadata(row, target), **body, **self._tools(row)})
        return out

    def _body(self, conv: tuple[Message, ...]) -> Row:
        flags = {"regenerated": [m.generated for m in conv]}
        if self.format == "sharegpt":
            return {"conversations": [self.style.sharegpt(m) for m in conv], **flags}
        return {"messages": [self.style.chat(m) for m in conv], **flags}

    def _tools(self, row: Row) -> Row:
        return {"tools": row.get("tools")} if self.style.tools else {}

    def _prompt_completion(self, target: Target) -> Row:
        plain = Style("none", tools=self.style.tools)
        return {
            "prompt": [plain.chat(m) for m in target.history],
            "completion": [self.style.chat(target.turn)],
        }

    def _metadata(self, row: Row, target: Target | None = None) -> Row:
        names = [f.name for f in METADATA_FIELDS] + self._keep
        if self._rejects:
            names += ["reason", "detail"]
        out = {name: row.get(name) for name in names}
        if target is not None:
            turn = target.turn.turn or {}
            out.update({k: turn.get(k) for k in _TURN_METADATA})
            out["id"] = f"{row['id']}#turn{target.index}"
            out["source_id"] = row["id"]
            out["assistant_turn_index"] = target.index
        return out

    def _specforge(self, row: Row, conv: tuple[Message, ...]) -> list[Row]:
        problem = specforge_problem(conv, reasoning=self.thinking, targets_only=self.expand)
        if problem is not None:
            self.skipped[problem] += 1
            return []
        head: Row = {"id": row["id"], "status": "success"}
        if row.get("tools"):
            head["tools"] = row["tools"]  # a JSON string, as SpecForge's preprocessing parses it
        if not self.expand:
            self._written += 1
            return [{**head, "conversations": [specforge_message(m, reasoning=self.thinking) for m in conv]}]
        out = []
        for target in targets(conv):
            messages = [specforge_message(m, reasoning=False) for m in target.history]
            messages.append(specforge_message(target.turn, reasoning=self.thinking))
            out.append(
                {
                    "id": f"{row['id']}#turn{target.index}",
                    "source_id": row["id"],
                    "source_row_index": self._written,
                    "assistant_turn_index": target.index,
                    "conversations": messages,
                    "status": "success",
                    **({"tools": row["tools"]} if row.get("tools") else {}),
                }
            )
        self._written += 1
        return out


class BatchOutput:
    """OpenAI / vLLM `run-batch` output lines, one per request.

    The samples of one input row (ids `<custom_id>#<k>` with `source_id`, from generation.samples or an OpenAI batch
    body's `n`) are one line under the row's custom_id with a choice per sample (`index` k), as OpenAI writes a
    request with n > 1. Samples of one row can lie in different parts, so a line is written when the last of its
    samples in this split arrives: `expect` is told, before a split, how many that is for each source id (export.py
    counts them from the id columns), and `finish` writes any group left open.
    """

    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()
        self._rejects = False
        self._size: Callable[[str], int] = lambda source_id: 0
        self._open: dict[str, list[Row]] = {}

    def schema(self, keep_fields: list[str], *, rejects: bool) -> pa.Schema | None:
        self._rejects = rejects
        return None

    def expect(self, size: Callable[[str], int]) -> None:
        """Start a split whose rows carrying `source_id` s number `size(s)` (each id counted once)."""
        self._size, self._open = size, {}

    def rows(self, batch: list[Row]) -> list[Row]:
        out = []
        for row in batch:
            source = row.get("source_id")
            if source is None:
                out.append(batch_output_line(row, rejected=self._rejects))
                continue
            group = self._open.setdefault(source, [])
            group.append(row)
            if len(group) >= self._size(source):
                out.append(batch_output_group(self._open.pop(source), rejected=self._rejects))
        return out

    def finish(self) -> list[Row]:
        """The lines of groups still open at the end of a split (only when `expect` counted more than came)."""
        out = [batch_output_group(group, rejected=self._rejects) for group in self._open.values()]
        self._open = {}
        return out


def batch_output_line(row: Row, *, rejected: bool = False) -> Row:
    """One line of an OpenAI/vLLM batch output file for a shard row; `custom_id` is the regen id.

    Line and request ids are derived from the regen id, so exporting twice gives identical files. A rejected row
    carries `error: {code: reason, message: detail}`, and a `response` only if a completion was received.
    """
    error = {"code": row.get("reason"), "message": row.get("detail")} if rejected else None
    return _line(row["id"], [(0, row)], rejected=rejected, error=error)


def batch_output_group(rows: list[Row], *, rejected: bool = False) -> Row:
    """One line for the samples of one input row: `custom_id` is their `source_id`, choice `index` each sample's k.

    A rejected group's `error.code` is the reason of its lowest sample, `error.message` lists every sample as
    `#k reason: detail`; its `response` holds the samples that received a completion, if any did.
    """
    samples = sorted(((_sample_index(row), row) for row in rows), key=lambda sample: sample[0])
    error = None
    if rejected:
        listed = "; ".join(f"#{k} {row.get('reason')}: {row.get('detail')}" for k, row in samples)
        error = {"code": samples[0][1].get("reason"), "message": listed}
    return _line(rows[0]["source_id"], samples, rejected=rejected, error=error)


def _sample_index(row: Row) -> int:
    """k of a sample id `<source_id>#<k>`."""
    head, _, k = row["id"].rpartition("#")
    if head != row["source_id"] or not k.isdigit():
        raise InputError(f"row {row['id']!r} has source_id {row['source_id']!r} but is not one of its samples")
    return int(k)


def _line(custom_id: str, samples: list[tuple[int, Row]], *, rejected: bool, error: Row | None) -> Row:
    digest = hashlib.sha256(custom_id.encode()).hexdigest()
    answered = [(k, row) for k, row in samples if not rejected or _has_completion(row)]
    response = None
    if answered:
        body = _completion_body(answered, digest)
        response = {"status_code": 200, "request_id": f"regen-req-{digest[:24]}", "body": body}
    return {"id": f"regen-batch-{digest[:24]}", "custom_id": custom_id, "response": response, "error": error}


def _has_completion(row: Row) -> bool:
    return row.get("finish_reason") is not None or row.get("answer") is not None


def _completion_body(samples: list[tuple[int, Row]], digest: str) -> Row:
    """A chat.completion with one choice per sample; usage counts the prompt once and sums the completions, as
    OpenAI does for n > 1 (a sum is null when one of its terms is unknown)."""
    rows = [row for _, row in samples]
    prompt = rows[0].get("prompt_tokens")
    completion = _sum(row.get("completion_tokens") for row in rows)
    usage: Row = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": None}
    if prompt is not None and completion is not None:
        usage["total_tokens"] = prompt + completion
    reasoning = _sum(row.get("reasoning_tokens") for row in rows)
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    created = min((row["created_at"] for row in rows if row.get("created_at") is not None), default=None)
    return {
        "id": f"chatcmpl-{digest[:24]}",
        "object": "chat.completion",
        "created": int(created.timestamp()) if created is not None else 0,
        "model": rows[0].get("model"),
        "choices": [_choice(k, row) for k, row in samples],
        "usage": usage,
    }


def _choice(index: int, row: Row) -> Row:
    message = {"role": "assistant", "content": row.get("answer"), "reasoning_content": row.get("reasoning")}
    return {"index": index, "message": message, "logprobs": None, "finish_reason": row.get("finish_reason")}


def _sum(values: Any) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total
