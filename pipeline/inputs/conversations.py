"""A conversation as users' datasets hold it, read into the messages regen sends.

Input rows carry a conversation in one of the shapes chat datasets use:
- OpenAI `messages`: `[{"role", "content"}]`, where `content` may be a list of parts (`{"type": "text", "text"}`
  or LLaMA-Factory's `{"type": "text", "value"}`); text parts are joined with newlines, a `reasoning` part is the
  turn's reasoning (`reasoning_content`), a `tool_call` part a tool call; media parts (image, audio, video) and
  unknown part types are refused naming the part;
- ShareGPT `conversations`: `[{"from", "value"}]` with `system`, `human` (user) and `gpt` (assistant), or the
  same list written with `role`/`content`.
Assistant turns may be empty or missing: they are what regen regenerates, so their content is never checked.

Tool conversations are read in each of their shapes and normalised to OpenAI's: an assistant turn that calls tools
is `{"role": "assistant", "content", "tool_calls": [{"type": "function", "function": {"name", "arguments"}}]}`
(`arguments` a JSON string; an `id` only when the input has one) and its results are `{"role": "tool", "content"}`
(plus `tool_call_id` / `name` when given). ShareGPT `function_call` / `observation` (and `tool`, `function`),
OpenAI `tool_calls` (and the older `function_call`) with `role: tool` (or `function`), and `tool_call` parts all
become that. `tools(row)` reads the row's `tools` column (a JSON string or a list) in the request's shape, and
`media_problem(row)` refuses a row whose images, videos or audio would be dropped (the run is text-only).

`find_conversation` says which field holds a row's conversation and `parse` normalises it; a conversation that
cannot be read raises `conversation.ConversationError` naming the message at fault. Which of its assistant turns
are generated, and the messages sent for each, is `pipeline/conversation.py`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..conversation import ConversationError, Message

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
TOOL_CALL_NAMES = frozenset({"function_call", "tool_call"})  # ShareGPT turns that call a tool
TOOL_RESULT_NAMES = frozenset({"observation", "tool", "function", "ipython"})  # ... and those that answer one
CONVERSATION_FIELDS = ("messages", "conversations")  # what `messages_field = "auto"` looks for, in this order
TOOLS_FIELD = "tools"
MEDIA_FIELDS = {"images": "image", "videos": "video", "audios": "audio"}  # LLaMA-Factory's media columns
MEDIA_PARTS = frozenset({"image", "image_url", "input_image", "video", "video_url", "audio", "input_audio", "file"})
TEXT_KEYS = ("text", "value")  # where a text part keeps its text: OpenAI's key, LLaMA-Factory's


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
        name = message["from"]
        role = _sharegpt_role(name) if isinstance(name, str) else None
        if role is None:
            raise ConversationError(
                f"{where}.from must be one of system, human, gpt, function_call, observation, got {short(name)}"
            )
        content, key = message.get("value"), "value"
        if name in TOOL_CALL_NAMES:
            return {"role": "assistant", "content": "", "tool_calls": [_call(content, f"{where}.value")]}
    else:
        role, content, key = message.get("role"), message.get("content"), "content"
        if role is None:
            raise ConversationError(f"{where} has no role")
        if role in TOOL_RESULT_NAMES:
            role = "tool"
        elif not isinstance(role, str) or role not in ROLES:
            roles = ", ".join(sorted(ROLES | {"tool"}))
            raise ConversationError(f"{where}.role must be one of {roles}, got {short(role)}")
    if content is None and role not in ("assistant", "tool"):
        raise ConversationError(f"{where} has no {key}")
    text, reasoning, calls = _content(content, f"{where}.{key}", role)
    out: Message = {"role": role, "content": text}
    if role == "assistant":
        calls += _message_calls(message, where)
        if reasoning is not None:
            out["reasoning_content"] = reasoning
        if calls:
            out["tool_calls"] = calls
    elif role == "tool":
        for name in ("tool_call_id", "name"):
            if isinstance(message.get(name), str):
                out[name] = message[name]
    return out


def _sharegpt_role(name: str) -> str | None:
    if name in TOOL_CALL_NAMES:
        return "assistant"
    if name in TOOL_RESULT_NAMES:
        return "tool"
    return SHAREGPT_ROLES.get(name)


def _content(content: Any, where: str, role: str) -> tuple[str, str | None, list[Message]]:
    """(text, reasoning or None, tool calls) of a message's content: a string, or a list of parts. Assistant turns
    may be empty or null; a tool result may be empty, never missing a string."""
    if content is None:
        return "", None, []
    if not isinstance(content, list):
        return _text(content, where, required=role not in ("assistant", "tool")), None, []
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[Message] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        at = f"{where}[{i}]"
        if kind in MEDIA_PARTS:
            raise ConversationError(
                f"{at} is an {kind!r} part: the run is text-only and would answer without the {kind.split('_')[0]}"
                " (media are never dropped silently)"
            )
        if not isinstance(part, dict) or not isinstance(kind, str):
            raise ConversationError(f"{at} must be a content part {{type, text}}, got {type_name(part)} {short(part)}")
        if kind == "tool_call":
            if role != "assistant":
                raise ConversationError(f"{at} is a 'tool_call' part in a {role} message; only assistants call tools")
            calls.append(_call(_part_value(part, at, ("value", "tool_call", "function"), str | dict), at))
        elif kind in ("text", "reasoning", "thinking"):
            keys = TEXT_KEYS if kind == "text" else (*TEXT_KEYS, kind)
            (texts if kind == "text" else thoughts).append(_part_value(part, at, keys, str))
        else:
            raise ConversationError(
                f"{at} has the unknown part type {kind!r}; parts may be text, reasoning or tool_call"
            )
    text = _text("\n".join(texts), where, required=role not in ("assistant", "tool"))
    return text, ("\n".join(thoughts) if thoughts else None), calls


def _part_value(part: Mapping[str, Any], where: str, keys: Sequence[str], kind: Any) -> Any:
    """The first of `keys` a part holds, which must be of `kind`."""
    for key in keys:
        if key in part:
            if not isinstance(part[key], kind):
                raise ConversationError(f"{where}.{key} must be a string, got {type_name(part[key])}")
            return part[key]
    raise ConversationError(f"{where} is a {part['type']!r} part with none of the keys {', '.join(keys)}")


def _message_calls(message: Mapping[str, Any], where: str) -> list[Message]:
    """An assistant message's own `tool_calls` (OpenAI), or its one legacy `function_call`."""
    calls = message.get("tool_calls")
    if calls is None and message.get("function_call") is not None:
        calls = [message["function_call"]]
    if calls is None:
        return []
    if isinstance(calls, str):
        calls = _json(calls, f"{where}.tool_calls")
    if not isinstance(calls, list):
        raise ConversationError(f"{where}.tool_calls must be a list, got {type_name(calls)}")
    return [_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]


def _call(value: Any, where: str) -> Message:
    """One tool call in OpenAI's shape, from `{"name", "arguments"}` (a JSON string or an object, as ShareGPT and
    `tool_call` parts store it) or `{"id"?, "type", "function": {...}}`."""
    if isinstance(value, str):
        value = _json(value, where)
    if not isinstance(value, dict):
        raise ConversationError(f"{where} must be a tool call {{name, arguments}}, got {type_name(value)}")
    function: dict[str, Any] = value["function"] if isinstance(value.get("function"), dict) else value
    name, arguments = function.get("name"), function.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise ConversationError(f"{where} is a tool call without a name")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    call: Message = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if isinstance(value.get("id"), str):
        call = {"id": value["id"], **call}
    return call


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConversationError(f"{where} is not valid JSON ({exc}): {short(text)}") from None


def _text(content: Any, where: str, *, required: bool) -> str:
    """A message's text. Assistant turns and tool results may be empty."""
    if not isinstance(content, str):
        raise ConversationError(f"{where} must be a string or a list of content parts, got {type_name(content)}")
    if required and not content.strip():
        raise ConversationError(f"{where} is empty")
    return content


def tools(row: Mapping[str, Any], field: str = TOOLS_FIELD) -> tuple[Message, ...]:
    """The row's tools as a request's `tools` (`{"type": "function", "function": {...}}` each), from a `tools`
    value that is a JSON string or a list; bare `{name, description, parameters}` objects (Glaive, xLAM) are
    wrapped. () when the row has none; ConversationError naming the field otherwise."""
    value = row.get(field)
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = _json(value, field)
    if not isinstance(value, list):
        raise ConversationError(f"{field} must be a list of tools (or a JSON string of one), got {type_name(value)}")
    out = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise ConversationError(f"{field}[{i}] must be an object, got {type_name(tool)}")
        function = tool.get("function") if tool.get("type") == "function" else tool
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ConversationError(f"{field}[{i}] is a tool without a name: {short(tool)}")
        out.append({"type": "function", "function": function})
    return tuple(out)


def media_problem(row: Mapping[str, Any]) -> str | None:
    """Why a row cannot be regenerated text-only: it carries images, videos or audio (LLaMA-Factory's `images` /
    `videos` / `audios` columns, with `<image>` placeholders in the text), which the run would never send, so its
    new answers would speak of media the model never saw. None when it carries none."""
    for field, kind in MEDIA_FIELDS.items():
        value = row.get(field)
        if value is None or (isinstance(value, list | str) and not value):
            continue
        count = len(value) if isinstance(value, list) else 1
        return (
            f"the row carries {count} {kind}{'s' if count != 1 else ''} in its {field!r} column (<{kind}> "
            f"placeholders); the run is text-only and would answer without them (media are never dropped silently)"
        )
    return None


def type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
