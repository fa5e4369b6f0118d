"""The simulated radix prefix cache: which part of a prompt the server has prefilled recently.

SGLang keeps the KV of prompts it has served in a radix tree and reuses its longest prefix match, so a conversation's
next turn sent to the same server prefills only its new tokens. The simulator does not tokenize: a chat prompt is a
chain of blocks, one per message (a string prompt or token ids: one per 64 tokens), each weighing its share of
`text.count_prompt_tokens`. A block is cached when the same chain of blocks before it and itself was seen; the match
stops at the first block that was not. The generated output is not inserted: Qwen3-family templates render a history
answer without its reasoning, so what the model generated is never a prefix of the next request anyway.

The cache is an LRU bounded in tokens. Every lookup touches its path from the deepest block back to the root, so a
block is always older than its ancestors and eviction (oldest first) only ever removes leaves.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import orjson

from .text import CHARS_PER_TOKEN

PAGE_CHARS = 64 * CHARS_PER_TOKEN  # a string prompt's block


def blocks(prompt: Any) -> list[tuple[bytes, int]]:
    """The prompt as (block bytes, tokens) in order; the tokens add up to `text.count_prompt_tokens(prompt)`."""
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):  # token ids (/generate)
        return [(orjson.dumps(prompt[i : i + 64]), len(prompt[i : i + 64])) for i in range(0, len(prompt), 64)]
    if isinstance(prompt, str):
        pages = [prompt[i : i + PAGE_CHARS] for i in range(0, len(prompt), PAGE_CHARS)] or [""]
        sizes = [len(page) // CHARS_PER_TOKEN for page in pages]
        sizes[0] = max(1, len(prompt) // CHARS_PER_TOKEN) - sum(sizes[1:])
        return [(page.encode(), size) for page, size in zip(pages, sizes, strict=True)]
    out: list[tuple[bytes, int]] = []
    for i, message in enumerate(prompt):
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        tokens = 4 + len(str(content or "")) // CHARS_PER_TOKEN + (3 if i == 0 else 0)
        out.append((orjson.dumps(message, option=orjson.OPT_SORT_KEYS), tokens))
    return out


class PrefixCache:
    """Cached prompt blocks by the hash of their chain, least recently used first; at most `capacity` tokens."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._nodes: OrderedDict[bytes, int] = OrderedDict()  # chain hash → the block's tokens
        self.tokens = 0  # held now
        self.reset_counters()

    def reset_counters(self) -> None:
        """`/_sim/reset`: zero what was counted (the cached blocks stay)."""
        self.lookups = 0
        self.hits = 0  # lookups that reused at least one block
        self.prompt_tokens = 0  # of every lookup
        self.cached_tokens = 0  # of those, reused
        self.evicted_tokens = 0

    def lookup(self, prompt: Any, prompt_tokens: int) -> int:
        """Tokens of `prompt` already cached (at most prompt_tokens - 1: the last one is always computed), then
        cache the whole prompt."""
        chain, matched, hit = b"", 0, True
        path: list[tuple[bytes, int]] = []
        for raw, tokens in blocks(prompt):
            chain = hashlib.blake2b(chain + raw, digest_size=16).digest()
            hit = hit and chain in self._nodes
            matched += tokens if hit else 0
            path.append((chain, tokens))
        cached = max(0, min(matched, prompt_tokens - 1))
        self._insert(path)
        self.lookups += 1
        self.hits += cached > 0
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached
        return cached

    def _insert(self, path: list[tuple[bytes, int]]) -> None:
        for chain, tokens in reversed(path):  # deepest first: each block stays older than its ancestors
            if chain in self._nodes:
                self._nodes.move_to_end(chain)
            else:
                self._nodes[chain] = tokens
                self.tokens += tokens
        while self.tokens > self.capacity and self._nodes:
            _, tokens = self._nodes.popitem(last=False)
            self.tokens -= tokens
            self.evicted_tokens += tokens

    def clear(self) -> None:
        """`/flush_cache`: forget every block (the counters stay)."""
        self._nodes.clear()
        self.tokens = 0

    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def snapshot(self) -> dict[str, Any]:
        return {
            "lookups": self.lookups,
            "hits": self.hits,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "cached_share": round(self.hit_rate(), 4),
            "tokens": self.tokens,
            "capacity_tokens": self.capacity,
            "evicted_tokens": self.evicted_tokens,
        }
