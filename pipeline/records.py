"""Value types that flow through a run: a Prompt in, a Completion back, a Verdict on it, a Turn kept."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestOverrides:
    """The sampling fields an OpenAI batch body sets (inputs/batch_lines.SAMPLING_FIELDS), None where it sets none.
    The client sends them instead of [generation]'s when `input.request_overrides` is on."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Prompt:
    """One input row, normalised. `source` names the file and row it came from ("file.jsonl:17").

    `messages` is the conversation as given (assistant turns possibly empty); `turns` the indices of the assistant
    turns to generate (see conversation.turn_positions), empty meaning one new turn after the last message.
    `source_id` is the input row's id when one row yields several samples (`id` is then `<source_id>#<k>`).
    `tools` are the row's tools in the request's shape (`{"type": "function", "function": {...}}`), sent with
    every turn of the row; empty when it has none. `overrides` are an OpenAI batch row's sampling fields (None for
    other inputs); `temperature` is this sample's own (generation.temperatures), sent whatever else says.
    """

    id: str
    messages: tuple[dict[str, Any], ...]
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # keep_fields (only), already stringified
    turns: tuple[int, ...] = ()
    source_id: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    # the conversation as read (inputs.stored.fingerprint), checked by the repaired export; derived from the fields
    # above, so it takes no part in equality
    fingerprint: str | None = field(default=None, compare=False)
    overrides: RequestOverrides | None = None
    temperature: float | None = None

    @property
    def positions(self) -> tuple[int, ...]:
        """Where the generated turns go: `turns`, or one new turn at the end."""
        return self.turns or (len(self.messages),)

    def text(self) -> str:
        """The text of the messages, one after the other: what a completion may copy from its input."""
        parts: list[str] = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class BadInput:
    """An input row that cannot become a Prompt. It lands in rejects with reason `bad_input`."""

    id: str
    source: str
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)
    source_id: str | None = None  # the input row's id when this is one of its samples


@dataclass(frozen=True, slots=True)
class Generated:
    """What a generation produced, and where and how fast: the head that a Completion and a Turn share, declared
    once here (both extend it). Turn also shares Completion's acceptance and repetition fields, but declares them
    itself: a Turn's fields follow the `turns` column's order (schema.TURN_TYPE), which puts `attempts` before them."""

    reasoning: str | None
    answer: str
    finish_reason: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    endpoint: str = ""
    latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Completion(Generated):
    """What one endpoint answered for one request, already split into reasoning and answer."""

    model: str = ""
    seed: int = 0
    # the server's speculative decoding on this request: tokens per verify step (the bonus token included), steps
    spec_accept_length: float | None = None
    spec_verify_ct: int | None = None
    # The stream guard (pipeline/loops.py) stopped it: aborted on the server, the text as far as it had streamed;
    # `loop_detail` is the guard's finding (which text loops, where, its unit).
    loop_stopped: bool = False
    tool_calls: tuple[dict[str, Any], ...] = ()  # the calls the model made instead of (or with) an answer
    loop_detail: str = ""
    # characters of the first verbatim repeating run in the reasoning or the answer (pipeline/loops.py's text rule;
    # 0: none), measured by the validator; None until then (and for a completion it never measured)
    repetition_chars: int | None = None


@dataclass(frozen=True, slots=True)
class Turn(Generated):
    """One generated assistant turn: an element of a row's `turns` column (schema.TURN_TYPE, same fields in the
    same order), and what the journal keeps of a finished turn of a conversation whose row is not stored yet.
    `attempts` counts the requests this turn took; every other field is the accepted completion's (`Turn.of`)."""

    attempts: int = 1
    spec_accept_length: float | None = None
    spec_verify_ct: int | None = None
    repetition_chars: int | None = None

    @classmethod
    def of(cls, completion: Completion, attempts: int) -> Turn:
        """The turn an accepted completion makes, field by name."""
        return cls(**{name: getattr(completion, name) for name in _FROM_COMPLETION}, attempts=attempts)


_FROM_COMPLETION = tuple(f.name for f in fields(Turn) if f.name != "attempts")  # Turn.of's: each a Completion field


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None = None
    detail: str = ""
    repetition_chars: int | None = None  # what the validator measured (Completion.repetition_chars)


ACCEPTED = Verdict(ok=True)
