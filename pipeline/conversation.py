"""A conversation as users' datasets hold it, and which of its assistant turns regen generates.

Input rows carry a conversation in one of the shapes chat datasets use:
- OpenAI `messages`: `[{"role", "content"}]`, where `content` may be a list of parts (`{"type": "text", "text"}`);
  text parts are joined with newlines, any other part (image, audio, ...) is refused naming the part;
- ShareGPT `conversations`: `[{"from", "value"}]` with `system`, `human` (user) and `gpt` (assistant), or the
  same list written with `role`/`content`.
Assistant turns may be empty or missing: they are what regen regenerates, so their content is never checked.

`turn_positions` says where the assistant turns to generate sit (`"all"`: every assistant turn in order, plus one
after a trailing user turn; `"last"`: only the turn after the last user turn), and `request` builds the messages
sent for turn k: the conversation before that position, every earlier generated turn replaced by its regenerated
answer (role + content, no reasoning unless asked), as SpecForge, Model-Optimizer and speculators regenerate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Message = dict[str, Any]

ROLES = frozenset({"system", "developer", "user", "assistant"})
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
}
CONVERSATION_FIELDS = ("messages", "conversations")  # what `messages_field = "auto"` looks for, in this order
TURN_MODES = ("all", "last")


class ConversationError(ValueError):
    """Why a row's conversation cannot be used; the reader turns it into a `bad_input` reject."""


def find_conversation(row: Mapping[str, Any], field: str) -> tuple[str, Any] | None:
    """The (field name, value) holding the row's conversation: `field`, or with "auto" the first of
    `messages`/`conversations` that is present and not null. None when there is none."""
    names = CONVERSATION_FIELDS if field == "auto" else (field,)
    for name in names:
        if row.get(name) is not None:
            return name, row[name]
    return None


def parse(value: Any, name: str) -> tuple[Message, ...]:
    """Normalise a conversation to `({"role", "content"}, ...)`; ConversationError names the message at fault."""
    if not isinstance(value, list):
        raise ConversationError(f"{name} must be a list of messages, got {type_name(value)}")
    if not value:
        raise ConversationError(f"{name} is empty")
    return tuple(_message(m, f"{name}[{i}]") for i, m in enumerate(value))


def _message(message: Any, where: str) -> Message:
    if not isinstance(message, dict):
        raise ConversationError(f"{where} must be an object with role and content, got {type_name(message)}")
    if "from" in message and "role" not in message:
        role = SHAREGPT_ROLES.get(message["from"]) if isinstance(message["from"], str) else None
        if role is None:
            raise ConversationError(f"{where}.from must be one of system, human, gpt, got {short(message['from'])}")
        content, key = message.get("value"), "value"
    else:
        role, content, key = message.get("role"), message.get("content"), "content"
        if role is None:
            raise ConversationError(f"{where} has no role")
        if role in ("tool", "function", "observation", "function_call", "ipython"):
            raise ConversationError(f"{where} is a tool turn ({role}); tool conversations are not supported yet")
        if not isinstance(role, str) or role not in ROLES:
            raise ConversationError(f"{where}.role must be one of {', '.join(sorted(ROLES))}, got {short(role)}")
    if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
        raise ConversationError(f"{where} calls a tool; tool conversations are not supported yet")
    if content is None and role != "assistant":
        raise ConversationError(f"{where} has no {key}")
    text = _text(content, f"{where}.{key}", required=role != "assistant")
    return {"role": role, "content": text}


def _text(content: Any, where: str, *, required: bool) -> str:
    """A message's text: a string, or text parts joined with newlines. Assistant turns may be empty or null."""
    if content is None:
        if required:
            raise ConversationError(f"{where} is missing")
        return ""
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise ConversationError(f"{where}[{i}] is a {short(kind or type_name(part))} part; only text parts")
            texts.append(part["text"])
        content = "\n".join(texts)
    if not isinstance(content, str):
        raise ConversationError(f"{where} must be a string or a list of text parts, got {type_name(content)}")
    if required and not content.strip():
        raise ConversationError(f"{where} is empty")
    return content


def turn_positions(messages: Sequence[Message], mode: str) -> tuple[int, ...]:
    """Indices in `messages` of the assistant turns to generate; `len(messages)` stands for a new turn after a
    trailing user message. ConversationError when no turn can be generated or the order makes no sense."""
    if mode not in TURN_MODES:
        raise ValueError(f"generation.turns must be one of {', '.join(TURN_MODES)}, got {mode!r}")
    roles = [m["role"] for m in messages]
    if "user" not in roles:
        raise ConversationError("the conversation has no user turn")
    positions = []
    for i, role in enumerate(roles):
        if role != "assistant":
            continue
        before = roles[i - 1] if i else None
        if before in (None, "assistant") or "user" not in roles[:i]:
            raise ConversationError(f"messages[{i}]: an assistant turn that follows no user turn")
        positions.append(i)
    if roles[-1] != "assistant":
        positions.append(len(roles))
    if mode == "last":
        last_user = max(i for i, role in enumerate(roles) if role == "user")
        positions = [p for p in positions if p > last_user][:1]
        if not positions:
            raise ConversationError("the conversation has no assistant turn after its last user turn")
    return tuple(positions)


def request(
    messages: Sequence[Message],
    positions: Sequence[int],
    k: int,
    answers: Sequence[str],
    reasoning: Sequence[str | None] = (),
) -> list[Message]:
    """The messages sent to generate turn `k`: everything before `positions[k]`, with the turns generated before
    it (`answers[j]` for `positions[j]`, j < k) in place of the input's assistant turns. `reasoning`, when given,
    goes back as `reasoning_content` on those history turns."""
    generated = {positions[j]: j for j in range(k)}
    out: list[Message] = []
    for i, message in enumerate(messages[: positions[k]]):
        j = generated.get(i)
        if j is None:
            out.append(dict(message))
            continue
        turn: Message = {"role": "assistant", "content": answers[j]}
        if j < len(reasoning) and reasoning[j]:
            turn["reasoning_content"] = reasoning[j]
        out.append(turn)
    return out


def type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
