"""Deterministic text for simulated generations.

A generation is a plan of tokens: `reasoning_tokens` of thinking, one `</think>` token, `content_tokens` of answer,
then EOS. Every ordinary token is exactly 4 characters, so payload sizes are real (about 4 characters per token)
and a prefix of `n` tokens is a string slice. The text comes from one precomputed block of sentences, so producing
even a long trace costs a slice and a concatenation, never a Python loop per word. A scripted plan (`--replies`,
replies.py) slices given texts instead, 4 characters per token but its last token of each part shorter, never
padded: what is sent is exactly the script.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import random
from dataclasses import dataclass
from typing import Any

import orjson

from ..sglang.releases import THINK_TAG_ONLY_AT_START

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


@functools.cache
def _block(size: int = 1 << 18) -> tuple[str, list[int]]:
    """A fixed 256 KiB of running text and its sentence starts, built on first use (~18 ms: not at every import,
    since `regen run` imports the simulator's capacity rules)."""
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


def _slice(offset_seed: int, n_chars: int) -> str:
    """`n_chars` of running text starting at a sentence boundary chosen by `offset_seed`."""
    if n_chars <= 0:
        return ""
    block, starts = _block()
    start = starts[offset_seed % len(starts)]
    end = start + n_chars
    if end <= len(block):
        return block[start:end]
    reps = end // len(block) + 1
    return (block * reps)[start:end]


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
class Script:
    """Given texts a plan emits instead of the text block's (a scripted reply, replies.py)."""

    reasoning: str  # the thinking ("" for an empty think block)
    content: str  # the answer after </think>
    ends: bool = True  # False: the text is what came out before max_tokens (finish "length"), no EOS after it
    loops: bool = False  # counted as a loop in /_sim/stats (`looping`), as the loop fault is


@dataclass(frozen=True, slots=True)
class Plan:
    """What the model will emit for one request if nothing stops it.

    The text is not materialized: a plan is two token counts and where its text starts in the shared block, and
    `raw_prefix` slices only the part a response shows (a 16-token reply never copies a 6,000-token trace).
    """

    reasoning_tokens: int  # thinking, 4 chars per token
    content_tokens: int  # answer after </think>, 4 chars per token
    thinking: bool  # whether a </think> token separates them
    answer_in_reasoning: bool = False  # no </think>: the answer stays inside the think block
    reasoning_at: int = 0  # sentence index where the thinking text starts
    content_at: int = 0  # sentence index where the answer's running text starts
    answer_number: int = 0
    loop_at: int = -1  # the loop fault: thinking falls into repeating one unit from this token on (-1: never)
    loop_chars: int = 0  # ... a unit of this many characters ...
    loop_from: int = 0  # ... taken from the text block at this sentence index
    script: Script | None = None  # the texts of a scripted reply, sliced instead of the block

    @property
    def loops(self) -> bool:
        return self.loop_at >= 0

    @property
    def looping(self) -> bool:
        """Whether `/_sim/stats` counts it under `looping`: the loop fault, or a script that says it loops."""
        return self.loop_at >= 0 or (self.script is not None and self.script.loops)

    @property
    def natural_tokens(self) -> int:
        """Tokens until and including EOS (a looping plan never ends: it runs to max_tokens; a script cut by length
        would need its EOS after the text, which it never reaches)."""
        if self.loops:
            return LOOP_TOKENS
        closes = self.thinking and not self.answer_in_reasoning
        return self.reasoning_tokens + (1 if closes else 0) + self.content_tokens + 1

    def limit(self, max_new_tokens: int | None) -> int:
        """Tokens decoded under `max_new_tokens`: through EOS, or to the cap, or (a script cut by length) to the
        end of its text, finishing "length" there."""
        natural = self.natural_tokens
        if self.script is not None and not self.script.ends:  # no EOS, and no </think> if no answer followed it
            closes = self.thinking and not self.answer_in_reasoning and self.content_tokens > 0
            natural = self.reasoning_tokens + (1 if closes else 0) + self.content_tokens
        return natural if max_new_tokens is None else min(natural, max_new_tokens)

    @property
    def reasoning(self) -> str:
        """The whole thinking text (with the answer-in-reasoning fault, the answer too)."""
        return self.reasoning_text(self.reasoning_tokens + (self.content_tokens if self.answer_in_reasoning else 0))

    @property
    def content(self) -> str:
        """The whole answer text ("" when the answer stays inside the think block)."""
        return "" if self.answer_in_reasoning else self.content_text(self.content_tokens)

    def reasoning_text(self, tokens: int) -> str:
        """The first `tokens` tokens of thinking (continuing into the answer under answer-in-reasoning)."""
        if self.loops:
            return self._looping_text(tokens)
        own = min(tokens, self.reasoning_tokens)
        if self.script is not None:
            out = self.script.reasoning[: own * CHARS_PER_TOKEN]
        else:
            out = _slice(self.reasoning_at, own * CHARS_PER_TOKEN)
        if tokens > own and self.answer_in_reasoning:
            out += self.content_text(tokens - own)
        return out

    def _looping_text(self, tokens: int) -> str:
        """Ordinary thinking up to `loop_at`, then one unit over and over: a verbatim loop to the end."""
        head = _slice(self.reasoning_at, min(tokens, self.loop_at) * CHARS_PER_TOKEN)
        n = (tokens - self.loop_at) * CHARS_PER_TOKEN
        if n <= 0:
            return head
        unit = _slice(self.loop_from, self.loop_chars)
        return head + (unit * (n // len(unit) + 1))[:n]

    def content_text(self, tokens: int) -> str:
        """The first `tokens` tokens of the answer: "The answer is N." then running text, padded to 4 per token."""
        n = min(tokens, self.content_tokens) * CHARS_PER_TOKEN
        if n <= 0:
            return ""
        if self.script is not None:
            return self.script.content[:n]  # never padded: the last token may be shorter
        head = f"\n\nThe answer is {self.answer_number}. "
        if n <= len(head):
            return head[:n]
        return (head + _slice(self.content_at, n - len(head))).ljust(n)


EMPTY_PLAN = Plan(0, 0, thinking=False)


def make_plan(seed: int, mean_tokens: int, thinking: bool) -> Plan:
    """A deterministic plan from `seed`: lognormal total length around `mean_tokens`, most of it reasoning."""
    u1, u2 = _uniform(seed, 1), _uniform(seed, 2)
    normal = math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)
    median = max(1.0, mean_tokens) * _MEDIAN_FACTOR
    total = max(12, int(median * math.exp(_SIGMA * normal)))
    answer_number = seed % 1000
    if not thinking:
        return Plan(0, total, False, False, 0, seed, answer_number)
    content_tokens = max(10, min(400, total // 10))
    reasoning_tokens = max(1, total - content_tokens)
    return Plan(reasoning_tokens, content_tokens, True, False, seed, seed >> 7, answer_number)


def scripted_plan(script: Script, thinking: bool) -> Plan:
    """The plan of a scripted reply: its texts at 4 characters per token (rounded up). Thinking, the reasoning then
    `</think>` (closed even when the reasoning is empty; a script cut by length with no content stops inside its
    think block); not thinking, the content alone (there is no think block to put the reasoning in)."""
    content = _tokens(script.content)
    if not thinking:
        return Plan(0, content, False, script=dataclasses.replace(script, reasoning=""))
    return Plan(_tokens(script.reasoning), content, True, script=script)


def _tokens(chars: str) -> int:
    return -(-len(chars) // CHARS_PER_TOKEN)


_SIGMA = 0.6
_MEDIAN_FACTOR = 1.0 / math.exp(_SIGMA * _SIGMA / 2.0)
_TWO_PI = 2.0 * math.pi


LOOP_TOKENS = 1 << 17  # how long a looping plan would run without max_tokens (a 128K context)


def loop_drawn(seed: int, p_loop: float) -> bool:
    """Whether the generation planned from `seed` (prompt, sampling params with the request's seed, server seed)
    loops: the same prompt and seed always do or never do; a retry with a new seed draws again."""
    return p_loop > 0 and _uniform(seed, 3) < p_loop


def with_loop(plan: Plan, seed: int) -> Plan:
    """The loop fault: thinking starts normally, then from 10-60% of its planned length repeats one unit of
    40-1,600 characters (a sentence to a few paragraphs of the text block) verbatim until max_tokens."""
    at = max(1, int(plan.reasoning_tokens * (0.1 + 0.5 * _uniform(seed, 4))))
    chars = 40 + int(1560 * _uniform(seed, 5) ** 2)
    return dataclasses.replace(
        plan, thinking=True, loop_at=at, loop_chars=chars, loop_from=int(_uniform(seed, 6) * (1 << 30))
    )


def with_answer_in_reasoning(plan: Plan) -> Plan:
    """The fault: the model never closes its think block, so the answer lands in the reasoning."""
    return dataclasses.replace(plan, thinking=True, answer_in_reasoning=True)


def raw_prefix(plan: Plan, tokens: int) -> tuple[str, str, bool]:
    """The first `tokens` tokens split as (reasoning text, content text, think block closed)."""
    if not plan.thinking:
        return "", plan.content_text(tokens), False
    r = plan.reasoning_tokens
    if tokens <= r or plan.answer_in_reasoning or plan.loops:
        return plan.reasoning_text(tokens), "", False
    return plan.reasoning_text(r), plan.content_text(tokens - r - 1), True


def qwen3_message(raw: str, v: tuple[int, ...], force: bool) -> tuple[str | None, str | None]:
    """(reasoning_content, content) SGLang `v`'s `--reasoning-parser qwen3` makes of raw output `raw` (non-stream).

    `parser/reasoning_parser.py::BaseReasoningFormatDetector.detect_and_parse` then `serving_chat.py`: up to 0.5.12
    every `<think>` is deleted and the text stripped, the answer stripped, an empty content null; from 0.5.14 only
    leading `<think>`s go, nothing is stripped, an empty content is "", and a `<tool_call>` closes unclosed
    reasoning. An empty reasoning is null everywhere."""
    if not force and "<think>" not in raw:
        return None, raw
    if v < THINK_TAG_ONLY_AT_START:
        body = raw.replace("<think>", "").strip()
        if THINK_END not in body:
            return body or None, None
        head, tail = body.split(THINK_END, 1)
        return head or None, tail.strip() or None
    body = raw
    while body.startswith("<think>"):
        body = body[len("<think>") :]
    if THINK_END not in body:
        if "<tool_call>" in body:
            at = body.index("<tool_call>")
            return body[:at] or None, body[at:]
        return body or None, ""
    head, tail = body.split(THINK_END, 1)
    return head or None, tail
