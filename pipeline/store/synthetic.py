"""Synthetic rows for benchmarks and tests of the store: real schema rows, no endpoint needed."""

from __future__ import annotations

from typing import Any

from ..records import BadInput, Completion, Prompt
from ..schema import accepted_row, bad_input_row, rejected_row


def prompt(id: str, text_bytes: int = 16) -> Prompt:
    return Prompt(id=id, messages=({"role": "user", "content": f"question {id}"},), source="synthetic")


def accepted(id: str, text_bytes: int = 16) -> dict[str, Any]:
    """An accepted row whose reasoning + answer hold about `text_bytes` bytes."""
    body = ("x" * text_bytes)[: max(text_bytes - 8, 1)]
    completion = Completion(
        reasoning=body, answer=f"answer {id}", finish_reason="stop", prompt_tokens=12, completion_tokens=34
    )
    return accepted_row(prompt(id), completion, attempts=1)


def rejected(id: str, reason: str = "empty_answer") -> dict[str, Any]:
    completion = Completion(reasoning="thinking", answer="", finish_reason="stop")
    return rejected_row(prompt(id), completion, attempts=2, reason=reason, detail="synthetic")


def bad_input(id: str) -> dict[str, Any]:
    return bad_input_row(BadInput(id=id, source="synthetic:1", detail="no messages"))
