"""Export formats: each turns a batch of shard rows into rows of one training shape, with one explicit schema.

| format | one row per | body columns |
|---|---|---|
| `chat` | conversation (or generated turn) | `messages` [{role, content, reasoning_content?}] |
| `sharegpt` | conversation (or generated turn) | `conversations` [{from, value, reasoning_content?}] |
| `specforge` | conversation (or generated turn) | `status`, `conversations` (SpecForge's regenerated shape) |
| `prompt-completion` | last turn (or generated turn) | `prompt`, `completion` (TRL's conversational shape) |
| `openai-batch-output` | row | `custom_id`, `response`, `error` |

`expand_turns` gives one row per generated assistant turn (`<id>#turn<k>`, the history without reasoning, the
turn with it). A format may skip rows its consumer would refuse (SpecForge's rules); `skipped` counts them by why.
The tokenized format lives in tokenized.py and follows the same protocol.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Protocol

import pyarrow as pa

from ..errors import ConfigError
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


def message_type(style: Style, *, sharegpt: bool = False) -> pa.DataType:
    names = ("from", "value") if sharegpt else ("role", "content")
    fields = [(n, pa.string()) for n in names]
    if style.reasoning == "field":
        fields.append(("reasoning_content", pa.string()))
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
        if self.format == "prompt-completion":
            prompt_type = pa.list_(message_type(Style("none")))
            body = [pa.field("prompt", prompt_type), pa.field("completion", pa.list_(message_type(self.style)))]
        elif self.format == "sharegpt":
            body = [pa.field("conversations", pa.list_(message_type(self.style, sharegpt=True)))]
        else:
            body = [pa.field("messages", pa.list_(message_type(self.style)))]
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
                return [{**self._metadata(row), **self._prompt_completion(found[-1])}]
            return [{**self._metadata(row), **self._body(conv)}]
        out = []
        for target in targets(conv):
            if self.format == "prompt-completion":
                body = self._prompt_completion(target)
            else:
                body = self._body((*target.history, target.turn))
            out.append({**self._metadata(row, target), **body})
        return out

    def _body(self, conv: tuple[Message, ...]) -> Row:
        if self.format == "sharegpt":
            return {"conversations": [self.style.sharegpt(m) for m in conv]}
        return {"messages": [self.style.chat(m) for m in conv]}

    def _prompt_completion(self, target: Target) -> Row:
        plain = Style("none")
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
                }
            )
        self._written += 1
        return out


class BatchOutput:
    """OpenAI / vLLM `run-batch` output lines, one per row."""

    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()
        self._rejects = False

    def schema(self, keep_fields: list[str], *, rejects: bool) -> pa.Schema | None:
        self._rejects = rejects
        return None

    def rows(self, batch: list[Row]) -> list[Row]:
        return [batch_output_line(row, rejected=self._rejects) for row in batch]


def batch_output_line(row: Row, *, rejected: bool = False) -> Row:
    """One line of an OpenAI/vLLM batch output file for a shard row; `custom_id` is the regen id.

    Line and request ids are derived from the regen id, so exporting twice gives identical files. A rejected row
    carries `error: {code: reason, message: detail}`, and a `response` only if a completion was received.
    """
    digest = hashlib.sha256(row["id"].encode()).hexdigest()
    has_completion = row.get("finish_reason") is not None or row.get("answer") is not None
    response = None
    if not rejected or has_completion:
        response = {"status_code": 200, "request_id": f"regen-req-{digest[:24]}", "body": _completion_body(row, digest)}
    error = {"code": row.get("reason"), "message": row.get("detail")} if rejected else None
    return {"id": f"regen-batch-{digest[:24]}", "custom_id": row["id"], "response": response, "error": error}


def _completion_body(row: Row, digest: str) -> Row:
    prompt, completion = row.get("prompt_tokens"), row.get("completion_tokens")
    usage: Row = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": None}
    if prompt is not None and completion is not None:
        usage["total_tokens"] = prompt + completion
    if row.get("reasoning_tokens") is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": row["reasoning_tokens"]}
    created = row.get("created_at")
    message = {"role": "assistant", "content": row.get("answer"), "reasoning_content": row.get("reasoning")}
    return {
        "id": f"chatcmpl-{digest[:24]}",
        "object": "chat.completion",
        "created": int(created.timestamp()) if created is not None else 0,
        "model": row.get("model"),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": row.get("finish_reason")}],
        "usage": usage,
    }
