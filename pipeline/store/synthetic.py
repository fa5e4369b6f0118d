"""Synthetic rows for benchmarks and tests of the store: real schema rows, no endpoint needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

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


SEED_QUESTIONS = (
    "Explain how a hash map resolves collisions, with an example.",
    "Write a Python function that merges two sorted lists.",
    "Why does the moon show phases? Answer for a curious child.",
    "Summarise the causes of the French Revolution in five points.",
    "Prove that the square root of 2 is irrational.",
    "Translate 'the weather is lovely today' into French and German.",
    "What is the difference between TCP and UDP?",
    "Plan a three-day trip to Kyoto on a small budget.",
)


def seed_dataset(path: Path, rows: int) -> None:
    """A dataset shaped like the seed's (issue 40): ShareGPT rows whose `gpt` turns are empty, 5% of them two rounds,
    10% with a system turn; questions of varied length, written as JSON lines. Deterministic in `rows`."""
    with open(path, "wb") as fh:
        for i in range(rows):
            question = f"#{i} " + SEED_QUESTIONS[i % len(SEED_QUESTIONS)] * (1 + i % 5)
            turns = [{"from": "system", "value": "You are a helpful assistant."}] if i % 10 == 3 else []
            turns += [{"from": "human", "value": question}, {"from": "gpt", "value": ""}]
            if i % 20 == 7:
                turns += [{"from": "human", "value": f"And in one sentence? (#{i})"}, {"from": "gpt", "value": ""}]
            fh.write(orjson.dumps({"id": f"seed-{i:07d}", "conversations": turns}) + b"\n")
