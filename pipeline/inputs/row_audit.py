"""One row's stored assistant turns judged by the validators of `regen run`: the verdict the reader, the audit and
the repaired export share.

`audit_row` reads a row as a file holds it (inputs/stored.py: reasoning in a field or inline `<think>`, an
unterminated `<think>` = truncated, a missing answer after a trailing user turn = an empty turn) and puts each turn
through `validator.validate` exactly as a completion would; a row that cannot be read as a conversation is `bad`.
It is what `regen audit` (dataset/audit.py) counts, what `input.select = "invalid"` and `input.repair =
"from_first_bad_turn"` (inputs/reader.py) choose by, and what the repaired export (dataset/repair.py) checks, so the
three agree on which rows are broken. `regenerated_positions` is where a row's generated turns go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import Config, ValidateConfig
from ..conversation import ConversationError, Message, turn_positions
from ..records import Verdict
from ..validator import validate
from . import conversations
from .ids import id_problem
from .input_files import Broken
from .line_blocks import BLOCK_BYTES
from .stored import StoredTurn, stored_turns

BAD_INPUT = "bad_input"


@dataclass(frozen=True)
class AuditOptions:
    """How to read and judge the rows: `[input]`-like fields, whether thinking is expected, the validators."""

    format: str = "auto"
    id_field: str = "id"
    messages_field: str = "auto"
    prompt_field: str = "prompt"
    thinking: bool = True
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    by: str = ""
    seed: int = 0
    examples: int = 3
    batch_rows: int = 1024
    jobs: int = 0  # processes judging JSONL blocks; 0 = one per core
    block_bytes: int = BLOCK_BYTES

    @classmethod
    def from_config(cls, cfg: Config, **overrides: Any) -> AuditOptions:
        inp = cfg.input
        base = cls(
            format=inp.format,
            id_field=inp.id_field,
            messages_field=inp.messages_field,
            prompt_field=inp.prompt_field,
            thinking=cfg.generation.thinking,
            validate=cfg.validate,
        )
        return _replace(base, overrides)


def _replace(opts: AuditOptions, overrides: dict[str, Any]) -> AuditOptions:
    return dataclasses.replace(opts, **{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True, slots=True)
class RowAudit:
    """The verdict on each stored assistant turn of one row, or why the row is unreadable (`bad`)."""

    turns: tuple[tuple[StoredTurn, Verdict], ...] = ()
    bad: str = ""

    @property
    def failing(self) -> bool:
        return bool(self.bad) or any(not v.ok for _, v in self.turns)

    def reasons(self) -> list[str]:
        """The reason codes of the row's failing turns, each once, in turn order."""
        if self.bad:
            return [BAD_INPUT]
        return list(dict.fromkeys(v.reason or "" for _, v in self.turns if not v.ok))


def audit_row(data: Any, opts: AuditOptions) -> RowAudit:
    """Judge one row as read from a file (a dict, or Broken)."""
    if isinstance(data, Broken):
        return RowAudit(bad=data.detail)
    if not isinstance(data, dict):
        return RowAudit(bad=f"row is a JSON {conversations.type_name(data)}, not an object")
    if isinstance(given := data.get(opts.id_field), str) and (problem := id_problem(given)):
        return RowAudit(bad=f"{opts.id_field}: {problem}")  # `regen run` refuses it as bad_input
    if (media := conversations.media_problem(data)) is not None:
        return RowAudit(bad=media)
    found = conversations.find_conversation(data, opts.messages_field)
    try:
        conversations.tools(data)
        if found is None:
            raw: Any = [{"role": "user", "content": data.get(opts.prompt_field)}]
            if not isinstance(raw[0]["content"], str):
                return RowAudit(bad=f"no conversation and no {opts.prompt_field!r} field")
            messages = conversations.parse(raw, opts.prompt_field)
        else:
            raw, messages = found[1], conversations.parse(found[1], found[0])
        turns = stored_turns(raw, messages)
    except ConversationError as exc:
        return RowAudit(bad=str(exc))
    return RowAudit(tuple((turn, _judge(turn, opts)) for turn in turns))


def regenerated_positions(messages: Sequence[Message], turns: str, repair: str, verdict: RowAudit) -> tuple[int, ...]:
    """Where the assistant turns to generate sit in `messages` (a row's conversation, with or without a system
    prompt put first): `conversation.turn_positions` for `generation.turns`, and with `repair =
    "from_first_bad_turn"` only those from the row's first failing turn on (`verdict` is its `audit_row`), the
    turns before it kept as given. A row with no failing turn is regenerated whole. ConversationError as
    `turn_positions`."""
    positions = turn_positions(messages, turns)
    first = next((k for k, (_, v) in enumerate(verdict.turns) if not v.ok), None)
    if repair != "from_first_bad_turn" or first is None:
        return positions
    # The audit numbers the turns `turn_positions(.., "all")` finds, in order; a system message shifts no ordinal.
    start = turn_positions(messages, "all")[first]
    return tuple(p for p in positions if p >= start)  # never empty: the last position is the largest


def _judge(turn: StoredTurn, opts: AuditOptions) -> Verdict:
    verdict = validate(turn.completion(), opts.validate, opts.thinking)
    if turn.missing and not verdict.ok:
        return Verdict(False, verdict.reason, "no assistant turn after the last user turn")
    return verdict
