"""Which assistant turns of a conversation regen generates, and the messages sent to generate each.

A conversation here is the normalised tuple of messages `inputs/conversations.py` reads from a row (OpenAI's shape:
`{"role", "content"}`, plus `reasoning_content`, `tool_calls`, `tool_call_id`/`name` where given). Assistant turns
that call tools and the tool results are kept as given; only assistant text turns are generated.

`turn_positions` says where the assistant turns to generate sit (`"all"`: every assistant turn in order, plus one
after a trailing user turn; `"last"`: only the turn after the last user turn), and `request` builds the messages
sent for turn k: the conversation before that position, every earlier generated turn replaced by its regenerated
answer (role + content, no reasoning unless asked), as SpecForge, Model-Optimizer and speculators regenerate.
`ConversationError` is why a row's conversation cannot be used, whether it cannot be read or its turns make no sense.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Message = dict[str, Any]

TURN_MODES = ("all", "last")


class ConversationError(ValueError):
    """Why a row's conversation cannot be used; the reader turns it into a `bad_input` reject."""


def is_tool_call(message: Mapping[str, Any]) -> bool:
    """An assistant turn that calls tools: kept as given, never generated."""
    return message.get("role") == "assistant" and bool(message.get("tool_calls"))


def turn_positions(messages: Sequence[Message], mode: str) -> tuple[int, ...]:
    """Indices in `messages` of the assistant turns to generate; `len(messages)` stands for a new turn after a
    trailing user message or tool result. Assistant turns that call tools and the tool results are kept, never
    generated. ConversationError when no turn can be generated or the order makes no sense."""
    if mode not in TURN_MODES:
        raise ValueError(f"generation.turns must be one of {', '.join(TURN_MODES)}, got {mode!r}")
    roles = [m["role"] for m in messages]
    if "user" not in roles:
        raise ConversationError("the conversation has no user turn")
    positions = []
    for i, message in enumerate(messages):
        before = messages[i - 1] if i else None
        if roles[i] == "tool":
            if before is None or not (is_tool_call(before) or before["role"] == "tool"):
                raise ConversationError(f"messages[{i}]: a tool result that answers no tool call")
            continue
        if roles[i] != "assistant":
            continue
        if "user" not in roles[:i] or before is None or (before["role"] == "assistant" and not is_tool_call(message)):
            raise ConversationError(f"messages[{i}]: an assistant turn that follows no user turn or tool result")
        if not is_tool_call(message):
            positions.append(i)
    if roles[-1] in ("user", "tool"):
        positions.append(len(roles))
    if not positions:
        raise ConversationError("the conversation has no assistant text turn to generate (it ends in a tool call)")
    if mode == "last":
        last_user = max(i for i, role in enumerate(roles) if role == "user")
        positions = [p for p in positions if p > last_user][-1:]
        if not positions:
            raise ConversationError("the conversation has no assistant turn after its last user turn")
    return tuple(positions)


def request(
    messages: Sequence[Message],
    positions: Sequence[int],
    k: int,
    answers: Sequence[str],
    reasoning: Sequence[str | None] = (),
    *,
    kept_reasoning: bool = False,
) -> list[Message]:
    """The messages sent to generate turn `k`: everything before `positions[k]`, with the turns generated before
    it (`answers[j]` for `positions[j]`, j < k) in place of the input's assistant turns. `reasoning`, when given,
    goes back as `reasoning_content` on those history turns; the input's own reasoning on the turns kept as given
    (tool calls, `turns = "last"` history) is sent only with `kept_reasoning`, as history carries answers alone."""
    generated = {positions[j]: j for j in range(k)}
    out: list[Message] = []
    for i, message in enumerate(messages[: positions[k]]):
        j = generated.get(i)
        if j is None:
            out.append(message if kept_reasoning else without_reasoning(message))
            continue
        turn: Message = {"role": "assistant", "content": answers[j]}
        if j < len(reasoning) and reasoning[j]:
            turn["reasoning_content"] = reasoning[j]
        out.append(turn)
    return out


def without_reasoning(message: Message) -> Message:
    """The message without the input's `reasoning_content` (the same dict when it has none)."""
    if "reasoning_content" not in message:
        return dict(message)
    return {key: value for key, value in message.items() if key != "reasoning_content"}
