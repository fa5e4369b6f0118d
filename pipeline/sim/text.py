"""Deterministic text for simulated generations.

A generation is a plan of tokens: `reasoning_tokens` of thinking, one `</think>` token, `content_tokens` of answer,
then EOS. Every ordinary token is exactly 4 characters, so payload sizes are real (about 4 characters per token)
and a prefix of `n` tokens is a string slice. The text comes from one precomputed block of sentences, so producing
even a long trace costs a slice and a concatenation, never a Python loop per word.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Any

import orjson

CHARS_PER_TOKEN = 4
THINK_END = "</think>"
EOS_TOKEN_ID = 151645  # Qwen <|im_end|>

_WORDS = (
    "the of and to in is that for it as with on be this are by we at or from an which can so if then "
    "value number answer first second next step case sum check term count each both since because means "
    "equation solve result consider given let suppose assume total two three four five times over under "
    "problem question condition factor prime even odd square root side angle length area point line "
    "function variable expression simplify compute substitute divide multiply subtract add verify again "
    "correct wrong careful maybe actually indeed therefore thus hence note recall also only must would "
    "should could might does not all some any more less than equal greater smaller integer fraction"
).split()
_OPENERS = ("Okay, ", "Let me think. ", "Wait, ", "So ", "Hmm, ", "Now ", "Alternatively, ", "Then ", "First, ")


def _build_block(size: int = 1 << 18) -> tuple[str, list[int]]:
    rng = random.Random(20260517)
    parts: list[str] = []
    starts: list[int] = []
    length = 0
    while length < size:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 18))]
        sentence = rng.choice(_OPENERS) + " ".join(words) + ". "
        if rng.random() < 0.15:
            sentence += "\n\n"
        starts.append(length)
        parts.append(sentence)
        length += len(sentence)
    return "".join(parts), starts


_BLOCK, _STARTS = _build_block()


def _slice(offset_seed: int, n_chars: int) -> str:
    """`n_chars` of running text starting at a sentence boundary chosen by `offset_seed`."""
    if n_chars <= 0:
        return ""
    start = _STARTS[offset_seed % len(_STARTS)]
    end = start + n_chars
    if end <= len(_BLOCK):
        return _BLOCK[start:end]
    reps = end // len(_BLOCK) + 1
    return (_BLOCK * reps)[start:end]


def digest(*parts: Any) -> int:
    """A stable 64-bit integer from JSON-able parts."""
    raw = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


def prompt_key(messages: Any) -> str:
    """The key `/_sim/stats` counts generations under: a hash of the messages (or the prompt)."""
    raw = orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def _uniform(seed: int, salt: int) -> float:
    x = (seed ^ (salt * 0x9E3779B97F4A7C15)) & 0xFFFFFFFFFFFFFFFF
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    return (x + 0.5) / 2.0**64


def count_prompt_tokens(messages: Any) -> int:
    """Chat-template-ish token count: ~4 characters per token plus a few per message."""
    total = 3
    if isinstance(messages, str):
        return max(1, len(messages) // CHARS_PER_TOKEN)
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 4 + len(str(content or "")) // CHARS_PER_TOKEN
    return total


@dataclass(frozen=True, slots=True)
class Plan:
    """What the model will emit for one request if nothing stops it."""

    reasoning: str  # thinking text, 4 chars per token
    content: str  # answer text after </think>, 4 chars per token
    thinking: bool  # whether a </think> token separates them
    answer_in_reasoning: bool = False  # no </think>: the answer stays inside the think block

    @property
    def reasoning_tokens(self) -> int:
        return len(self.reasoning) // CHARS_PER_TOKEN

    @property
    def content_tokens(self) -> int:
        return len(self.content) // CHARS_PER_TOKEN

    @property
    def natural_tokens(self) -> int:
        """Tokens until and including EOS."""
        closes = self.thinking and not self.answer_in_reasoning
        return self.reasoning_tokens + (1 if closes else 0) + self.content_tokens + 1


def make_plan(seed: int, mean_tokens: int, thinking: bool) -> Plan:
    """A deterministic plan from `seed`: lognormal total length around `mean_tokens`, most of it reasoning."""
    u1, u2 = _uniform(seed, 1), _uniform(seed, 2)
    sigma = 0.6
    normal = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    median = max(1.0, mean_tokens) / math.exp(sigma * sigma / 2.0)
    total = max(12, int(median * math.exp(sigma * normal)))
    answer_number = seed % 1000
    if not thinking:
        return Plan("", _content(seed, total, answer_number), thinking=False)
    content_tokens = max(10, min(400, total // 10))
    reasoning_tokens = max(1, total - content_tokens)
    reasoning = _slice(seed, reasoning_tokens * CHARS_PER_TOKEN)
    return Plan(reasoning, _content(seed >> 7, content_tokens, answer_number), thinking=True)


def _content(seed: int, tokens: int, answer_number: int) -> str:
    n = tokens * CHARS_PER_TOKEN
    head = f"\n\nThe answer is {answer_number}. "
    text = head + _slice(seed, max(0, n - len(head)))
    return text[:n].ljust(n)


def with_answer_in_reasoning(plan: Plan) -> Plan:
    """The fault: the model never closes its think block, so the answer lands in the reasoning."""
    return Plan(plan.reasoning + plan.content, "", thinking=True, answer_in_reasoning=True)


def raw_prefix(plan: Plan, tokens: int) -> tuple[str, str, bool]:
    """The first `tokens` tokens split as (reasoning text, content text, think block closed)."""
    r = plan.reasoning_tokens
    if not plan.thinking:
        return "", plan.content[: tokens * CHARS_PER_TOKEN], False
    if tokens <= r:
        return plan.reasoning[: tokens * CHARS_PER_TOKEN], "", False
    if plan.answer_in_reasoning:
        return plan.reasoning, "", False
    rest = tokens - r - 1
    return plan.reasoning, plan.content[: rest * CHARS_PER_TOKEN], True
