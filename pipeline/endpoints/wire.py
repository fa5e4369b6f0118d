"""What a server sent for one chat completion, as one typed record, built by one reader for plain and streamed bodies.

`Pieces` takes a plain body's choice (`take_body`) or a stream's events (`take`, and `take_delta` for the deltas the
fast path of `sse.take_text_events` and the stream guard pick out) and gives a `Wire`: every field regen reads from
the wire, and no other. A field is produced here or does not exist: the client, the stream guard's partial and the
completion it becomes all go through `Pieces.result`.

What is read, and from where (SGLang's `serving_chat.py`; vLLM's OpenAI server):
- the reasoning from `reasoning_content` (SGLang) or `reasoning` (vLLM); the answer from `content`;
- `finish_reason`; the tool calls (a plain message's `tool_calls`, or a stream's `delta.tool_calls` pieces joined);
- `usage` (`prompt_tokens`, `completion_tokens`, `reasoning_tokens` or `completion_tokens_details.reasoning_tokens`);
- the speculative acceptance of this request: `sglext.spec_tokens_details` (a plain body's top level, or a stream's
  `choices: []` chunk; asked for with `return_spec_tokens_details`, SGLang >= 0.5.19) or a choice's `meta_info`
  (`return_meta_info`, >= 0.5.14): `spec_accept_length` and `spec_verify_ct` (pipeline/sglang/releases.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..loops import Loop


@dataclass(frozen=True, slots=True)
class Wire:
    """One chat completion as the server sent it (a stream: as far as it was read)."""

    content: str
    reasoning: str | None
    finish_reason: str
    tool_calls: tuple[dict[str, Any], ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    model: str = ""
    spec_accept_length: float | None = None
    spec_verify_ct: int | None = None
    # The stream guard stopped it (endpoints/loop_guard.py): which text looped, and the loop it found there.
    loop: Loop | None = None
    loop_field: str = ""

    @property
    def loop_detail(self) -> str:
        return self.loop.describe(self.loop_field) if self.loop is not None else ""


class Pieces:
    """The pieces of one completion, taken in order from a plain body or from a stream's parsed events."""

    __slots__ = ("content", "finish_reason", "model", "reasoning", "spec", "tool_calls", "usage")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.finish_reason = ""
        self.tool_calls: dict[int, dict[str, Any]] = {}  # index -> the call its pieces add up to
        self.usage: Mapping[str, Any] = {}
        self.spec: Mapping[str, Any] = {}
        self.model = ""

    def take_delta(self, delta: Mapping[str, Any]) -> None:
        """One streamed delta: its answer, reasoning and tool-call pieces."""
        self._take_text(delta)
        for piece in delta.get("tool_calls") or ():
            self.add_call(piece)

    def take_deltas(self, deltas: list[Any]) -> None:
        """Many streamed deltas at once (dicts; the fast path of `sse.take_text_events`)."""
        self.content += [t for d in deltas if (t := d.get("content"))]
        self.reasoning += [t for d in deltas if (t := d.get("reasoning_content") or d.get("reasoning"))]
        for piece in (piece for d in deltas if "tool_calls" in d for piece in d["tool_calls"] or ()):
            self.add_call(piece)

    def _take_text(self, message: Mapping[str, Any]) -> None:
        if text := message.get("content"):
            self.content.append(text)
        if (thought := message.get("reasoning_content")) or (thought := message.get("reasoning")):
            self.reasoning.append(thought)

    def take(self, events: Iterable[Mapping[str, Any]]) -> None:
        """A stream's parsed events (an error event is the caller's to have refused before)."""
        for event in events:
            self._take_common(event)
            for choice in event.get("choices") or ():
                self.take_delta(choice.get("delta") or {})
                if finish := choice.get("finish_reason"):
                    self.finish_reason = finish
                if meta := choice.get("meta_info"):
                    self._take_spec(meta)

    def take_body(self, body: Mapping[str, Any]) -> None:
        """A plain (non-streamed) chat completion body. KeyError/IndexError/TypeError when it is not one."""
        self._take_common(body)
        choice = body["choices"][0]
        message = choice["message"]
        self._take_text(message)
        self.tool_calls = dict(enumerate(message.get("tool_calls") or ()))
        self.finish_reason = choice.get("finish_reason") or ""
        if meta := choice.get("meta_info"):
            self._take_spec(meta)

    def _take_common(self, obj: Mapping[str, Any]) -> None:
        if isinstance(model := obj.get("model"), str) and model:
            self.model = model
        if usage := obj.get("usage"):
            self.usage = usage
        if isinstance(ext := obj.get("sglext"), dict) and isinstance(spec := ext.get("spec_tokens_details"), dict):
            self._take_spec(spec)

    def _take_spec(self, spec: Mapping[str, Any]) -> None:
        if isinstance(spec, dict) and (spec.get("spec_accept_length") is not None or "spec_verify_ct" in spec):
            self.spec = spec

    def add_call(self, piece: Mapping[str, Any]) -> None:
        """One `delta.tool_calls` entry: a call's id, name and first arguments, or more of its arguments."""
        call = self.tool_calls.setdefault(piece.get("index") or 0, {"type": "function", "function": {}})
        if piece.get("id"):
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if function.get("name"):
            call["function"]["name"] = function["name"]
        arguments = call["function"].get("arguments", "") + (function.get("arguments") or "")
        call["function"]["arguments"] = arguments

    def result(self, finish_reason: str | None = None, loop: Loop | None = None, loop_field: str = "") -> Wire:
        """The record these pieces add up to; `finish_reason` overrides the one taken (a stream the guard stopped:
        `abort`, what SGLang reports for an aborted request)."""
        usage = self.usage if isinstance(self.usage, dict) else {}
        reasoning_tokens = usage.get("reasoning_tokens")
        if reasoning_tokens is None:
            reasoning_tokens = ((usage.get("completion_tokens_details") or {}).get("reasoning_tokens")) or None
        return Wire(
            content="".join(self.content),
            reasoning="".join(self.reasoning) if self.reasoning else None,
            finish_reason=self.finish_reason if finish_reason is None else finish_reason,
            tool_calls=tuple(self.tool_calls[i] for i in sorted(self.tool_calls)),
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
            reasoning_tokens=_int(reasoning_tokens),
            model=self.model,
            spec_accept_length=_float(self.spec.get("spec_accept_length")),
            spec_verify_ct=_int(self.spec.get("spec_verify_ct")),
            loop=loop,
            loop_field=loop_field,
        )


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
