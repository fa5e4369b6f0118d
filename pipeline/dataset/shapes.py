"""A shard row as the whole conversation it stands for, and that conversation in the shapes trainers read.

A row's `messages` are what was sent for its last turn: the input's system and user turns, with every assistant
turn regen generated before the last one in place as its answer only. The reasoning of those turns lives in
`turns` (one entry per generated assistant turn, in order), and the last turn's in `reasoning`/`answer`.
`conversation(row)` puts them back together: every assistant message with its reasoning (None when the model's
reasoning is unknown: an input turn that was kept, with `generation.turns = "last"`) and whether regen generated it.

Reasoning reaches a trainer in one of three ways (`REASONING_MODES`):
- `field`: `reasoning_content` on each assistant message, where Qwen3.x chat templates, TRL and SpecForge's
  thinking parser read it;
- `inline`: `<think>\\n{reasoning}\\n</think>\\n\\n{answer}` in the content (a generated turn without reasoning
  gets an empty think block);
- `none`: the answer alone.

Tool conversations (issue 27): a row's `message_extras` (parallel to `messages`) gives each message what it holds
beyond role and content (an assistant's `tool_calls`, a tool result's `tool_call_id`); those turns were kept as given,
never generated, so the generated turns line up with the assistant messages that call no tool. With `tools=True` a
Style writes them: `tool_calls` on chat messages, `function_call` / `observation` turns in ShareGPT (LLaMA-Factory's
names).

`targets(conv)` are the turns a per-turn expansion trains on: each generated assistant turn, with the history
before it stripped of reasoning (Qwen3.6 templates render reasoning only after the last user turn, so SpecForge
trains multi-turn reasoning from one sample per assistant turn, and so does TRL's prompt/completion shape).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

REASONING_MODES = ("field", "inline", "none")
SHAREGPT_ROLES = {"system": "system", "user": "human", "assistant": "gpt", "tool": "observation"}

Row = dict[str, Any]


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    reasoning: str | None = None  # assistant turns: the model's reasoning, None when unknown
    generated: bool = False  # an assistant turn regen generated (not one kept from the input)
    turn: Row | None = None  # the generated turn's entry of the `turns` column (token counts, finish reason)
    extras: Row | None = None  # tool_calls (an assistant's), tool_call_id / name (a tool result's)

    @property
    def calls(self) -> list[Row]:
        """The tools this assistant turn calls (kept from the input, never generated)."""
        return list((self.extras or {}).get("tool_calls") or [])


@dataclass(frozen=True)
class Target:
    """One generated assistant turn and the conversation before it; `index` counts the conversation's assistant
    turns from 0 (SpecForge's `assistant_turn_index`)."""

    history: tuple[Message, ...]
    turn: Message
    index: int


def conversation(row: Row) -> tuple[Message, ...]:
    """The row's whole conversation; ends with the last generated turn when the row has a completion."""
    extras = row.get("message_extras") or []
    messages = [
        Message(m["role"], m["content"] or "", extras=json.loads(extras[i]) if i < len(extras) and extras[i] else None)
        for i, m in enumerate(row.get("messages") or [])
    ]
    turns = list(row.get("turns") or [])
    has_final = row.get("finish_reason") is not None or row.get("answer") is not None
    if not turns and has_final:  # schema version 1: the row's own columns are its one turn
        turns = [{k: row.get(k) for k in ("reasoning", "answer", "finish_reason", "completion_tokens")}]
    history_turns = turns[:-1] if has_final else turns
    assistant = [i for i, m in enumerate(messages) if m.role == "assistant" and not m.calls]
    for i, turn in zip(assistant[len(assistant) - len(history_turns) :], history_turns, strict=False):
        messages[i] = Message("assistant", messages[i].content, turn.get("reasoning"), True, turn)
    if has_final:
        final = turns[-1] if turns else {}
        messages.append(Message("assistant", row.get("answer") or "", row.get("reasoning"), True, final))
    return tuple(messages)


def targets(conv: tuple[Message, ...]) -> list[Target]:
    out = []
    index = 0
    for i, message in enumerate(conv):
        if message.role != "assistant":
            continue
        if message.generated:
            history = tuple(Message(m.role, m.content, None, m.generated, m.turn, m.extras) for m in conv[:i])
            out.append(Target(history, message, index))
        index += 1
    return out


def think_block(reasoning: str | None, answer: str, think_open: str = "<think>", think_close: str = "</think>") -> str:
    """The assistant turn a trainer sees inline: the reasoning inside think tags, a blank line, then the answer."""
    return f"{think_open}\n{reasoning or ''}\n{think_close}\n\n{answer}"


@dataclass(frozen=True)
class Style:
    """How messages are written: the reasoning mode and the think tags of `inline`."""

    reasoning: str = "field"
    think_open: str = "<think>"
    think_close: str = "</think>"
    tools: bool = False  # the run has tool conversations: messages carry tool_calls / tool_call_id

    def chat(self, message: Message) -> Row:
        """`{role, content}` plus, in `field` mode, an assistant turn's `reasoning_content` (null when unknown; other
        roles have no such key in JSONL, a null in Parquet's struct), and with `tools` the turn's `tool_calls` and
        `tool_call_id` (null where it has none)."""
        content = message.content
        if self.reasoning == "inline" and message.generated:
            content = think_block(message.reasoning, content, self.think_open, self.think_close)
        out: Row = {"role": message.role, "content": content}
        if self.reasoning == "field" and message.role == "assistant":
            out["reasoning_content"] = message.reasoning
        if self.tools:
            extras = message.extras or {}
            out["tool_calls"] = [_call(c) for c in message.calls] or None
            out["tool_call_id"] = extras.get("tool_call_id")
        return out

    def sharegpt(self, message: Message) -> Row:
        """ShareGPT's turn; a tool-call turn is LLaMA-Factory's `function_call` (`{"name", "arguments"}` as JSON, a
        list of them for parallel calls) and a tool result its `observation`."""
        chat = self.chat(message)
        role = SHAREGPT_ROLES.get(message.role, message.role)
        value = chat["content"]
        if message.calls:
            calls = [{"name": c["function"]["name"], "arguments": _arguments(c)} for c in message.calls]
            role, value = "function_call", json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
        out: Row = {"from": role, "value": value}
        if "reasoning_content" in chat:
            out["reasoning_content"] = chat["reasoning_content"]
        return out


def _call(call: Row) -> Row:
    """A tool call with every field of the export's struct (`id` null when the input had none)."""
    function = call.get("function") or {}
    name, arguments = function.get("name"), function.get("arguments")
    return {"id": call.get("id"), "type": "function", "function": {"name": name, "arguments": arguments}}


def _arguments(call: Row) -> Any:
    """A call's arguments as an object (ShareGPT stores them parsed), or the string when it is not JSON."""
    text = (call.get("function") or {}).get("arguments")
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def specforge_problem(conv: tuple[Message, ...] | list[Message], *, reasoning: bool, targets_only: bool) -> str | None:
    """Why SpecForge's regenerated-data rules would refuse this conversation, or None.

    The rules of its `scripts/validate_regenerated_data.py` (read, not copied): system turns only before the first
    user turn, then strictly user/assistant alternation starting with user and ending with assistant, every content
    a non-empty string; with `--strict-think-markers` no `<think>`/`</think>` (any case) in an assistant's content or
    reasoning; with `--expect-reasoning` non-empty reasoning on every assistant turn (`targets_only`: on generated
    turns only, for expanded rows whose history carries none).
    """
    if not conv:
        return "empty_conversation"
    if any(m.calls or m.role == "tool" for m in conv):
        order = _tool_order(conv)
        if order is not None:
            return order
    else:
        expected, saw_user = "user", False
        for m in conv:
            if not m.content.strip():
                return "empty_content"
            if m.role == "system" and not saw_user:
                continue
            if m.role != expected:
                return "role_order" if m.role in ("user", "assistant") else "unsupported_role"
            saw_user = True
            expected = "assistant" if m.role == "user" else "user"
    if conv[-1].role != "assistant":
        return "role_order"
    for m in conv:
        if m.role != "assistant":
            continue
        if _has_marker(m.content) or _has_marker(m.reasoning or ""):
            return "think_marker"
        wanted = reasoning and (m.generated or not (targets_only or m.calls))
        if wanted and not (m.reasoning or "").strip():
            return "missing_reasoning"
    return None


def _tool_order(conv: tuple[Message, ...] | list[Message]) -> str | None:
    """SpecForge's order for tool conversations (`specforge/data/parse.py`, read): system first, then a user turn;
    a tool result after an assistant or tool turn; an assistant turn after a user or tool turn. Content may be empty
    only on a turn that calls tools."""
    roles = [m.role for m in conv]
    while roles and roles[0] == "system":
        roles.pop(0)
    if not roles or roles[0] != "user":
        return "role_order"
    for m in conv:
        if not m.content.strip() and not m.calls:
            return "empty_content"
    for before, after in itertools.pairwise(roles):
        if (after == "tool" and before not in ("assistant", "tool")) or (
            after == "assistant" and before not in ("user", "tool")
        ):
            return "role_order"
        if after not in ("user", "assistant", "tool"):
            return "unsupported_role"
    return None


def _has_marker(text: str) -> bool:
    lowered = text.lower()
    return "<think>" in lowered or "</think>" in lowered


def specforge_message(message: Message, *, reasoning: bool) -> Row:
    """SpecForge's message shape: `reasoning_content` on assistant turns only, and only when it is kept."""
    out: Row = {"role": message.role, "content": message.content}
    if reasoning and message.role == "assistant" and message.reasoning is not None:
        out["reasoning_content"] = message.reasoning
    if message.calls:
        out["tool_calls"] = message.calls  # as SpecForge's parser reads them (`arguments` a JSON string)
    return out
