"""Tool calls in the simulator: a request's `tools` checked as SGLang's schema checks them, and a generation that
calls a tool instead of answering when its last user message asks for it (`[[sim:tool_call]]` on every attempt,
`[[sim:tool_call_once]]` on the prompt's first attempt only). With `--tool-call-parser` the call comes back as SGLang
returns a parsed one (`message.tool_calls`, `finish_reason: "tool_calls"`, `matched_stop: null`; streamed as a
`delta.tool_calls` chunk before the finish chunk); without a parser it stays in the content as the model wrote it.
"""

from __future__ import annotations

from typing import Any, Protocol


class ToolRequest(Protocol):
    """What of a request (`protocol.GenRequest`) these functions read; a protocol, so this module does not import
    the one that imports it."""

    @property
    def tools(self) -> tuple[str, ...]: ...
    @property
    def tool_marker(self) -> str | None: ...
    @property
    def tool_call(self) -> str | None: ...


# A prompt asks the simulator to call one of the request's tools instead of answering: on every attempt, or on the
# prompt's first attempt only (so a client's resample with a new seed gets an answer).
TOOL_CALL_ALWAYS = "[[sim:tool_call]]"
TOOL_CALL_ONCE = "[[sim:tool_call_once]]"


def check_tools(tools: Any) -> tuple[str, ...]:
    """The tool names of a request's `tools`, checked as SGLang's request schema does: ValueError with the 400's
    detail otherwise."""
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise ValueError("tools: Input should be a valid list")
    names = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            raise ValueError(f"tools.{i}.function: Field required")
        if not isinstance(function.get("name"), str):
            raise ValueError(f"tools.{i}.function.name: Field required")
        names.append(function["name"])
    return tuple(names)


def tool_marker(messages: list[dict[str, Any]]) -> str | None:
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = last_user.get("content") if last_user else None
    if not isinstance(content, str):
        return None
    return TOOL_CALL_ONCE if TOOL_CALL_ONCE in content else TOOL_CALL_ALWAYS if TOOL_CALL_ALWAYS in content else None


def tool_call_for(req: ToolRequest, attempt: int) -> str | None:
    """The tool the `attempt`-th request (0-based) of this prompt calls, or None: it answers."""
    if not req.tools or req.tool_marker is None:
        return None
    return req.tools[0] if req.tool_marker == TOOL_CALL_ALWAYS or attempt == 0 else None


def tool_calls(req: ToolRequest, rid: str) -> list[dict[str, Any]]:
    """The `tool_calls` of a message that calls `req.tool_call`, as SGLang's parser returns them."""
    call = {"name": req.tool_call, "arguments": "{}"}
    return [{"id": f"call_{rid[:24]}", "index": 0, "type": "function", "function": call}]


def tool_call_text(req: ToolRequest) -> str:
    """The call as the model writes it (Qwen/Hermes style), which is what content holds without a parser."""
    return f'<tool_call>\n{{"name": "{req.tool_call}", "arguments": {{}}}}\n</tool_call>'
