"""What the simulator counts, for `GET /_sim/stats`, `/metrics` and the tests that measure wasted work.

A *generation* is a decode that ran to its end (a finished or length-capped completion, including ones whose
response was then broken by a reset or invalid-JSON fault: the GPU did the work). Requests whose `rid` starts
with `regen-probe-` are preflight probes: counted apart, never as generations of a prompt.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

PROBE_PREFIX = "regen-probe-"
BY_PROMPT = ("generations", "generations_by_rid", "with_tools", "spec_by_rid")  # one entry per prompt key or rid


def is_probe(rid: str | None) -> bool:
    return rid is not None and rid.startswith(PROBE_PREFIX)


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0  # generation-route requests received (probes included)
        self.probe_requests = 0
        self.probe_generations = 0
        self.in_flight = 0
        self.responses = 0  # generation-route responses sent, any status
        self.generations: Counter[str] = Counter()  # prompt key → completed generations
        self.generations_by_rid: Counter[str] = Counter()
        self.log: dict[str, list[tuple[str | None, float]]] = {}  # prompt key → (rid, wall time) of each generation
        self.attempts: Counter[str] = Counter()  # prompt key → requests received (drives fault draws)
        self.with_tools: Counter[str] = Counter()  # prompt key → requests received with a `tools` list
        self.cancelled = 0  # decodes stopped early: client gone or /abort_request
        self.faults: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # status → count of error responses the protocol itself gave
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.looping_generations = 0  # generations of the loop fault that ended (ran to max_tokens, or stopped)
        self.looping_tokens = 0  # tokens they decoded, the ones aborted early included: what loops cost the GPU
        self.cancelled_tokens = 0  # tokens decoded by generations that were then aborted (not in generation_tokens)
        self.scripted_generations = 0  # generations of scripted replies (--replies) that ended, aborted ones included
        self.scripted_tokens = 0  # tokens they decoded
        # rid → [spec_accept_length, spec_verify_ct] of each chat response that carried them (meta_info or sglext)
        self.spec_by_rid: dict[str, list[float]] = {}

    def received(self, key: str, rid: str | None) -> int:
        """Count a request; returns its attempt number for this prompt (0-based)."""
        self.requests += 1
        if is_probe(rid):
            self.probe_requests += 1
        attempt = self.attempts[key]
        self.attempts[key] = attempt + 1
        return attempt

    def generated(self, key: str, rid: str | None, prompt_tokens: int, tokens: int) -> None:
        self.prompt_tokens_total += prompt_tokens
        self.generation_tokens_total += tokens
        if is_probe(rid):
            self.probe_generations += 1
            return
        self.generations[key] += 1
        self.log.setdefault(key, []).append((rid, time.time()))
        if rid is not None:
            self.generations_by_rid[rid] += 1

    def spec_sent(self, rid: str | None, spec: dict[str, Any] | None) -> None:
        """A chat response carried this request's speculative acceptance (a probe's is not kept)."""
        if rid is not None and spec is not None and not is_probe(rid):
            self.spec_by_rid[rid] = [spec["spec_accept_length"], spec["spec_verify_ct"]]

    def ended(self, tokens: int, looping: bool, scripted: bool) -> None:
        """A generation ended (completed or aborted) after decoding `tokens`: count it as a loop, as scripted."""
        if looping:
            self.looping_generations += 1
            self.looping_tokens += tokens
        if scripted:
            self.scripted_generations += 1
            self.scripted_tokens += tokens

    def snapshot(self, log: bool = False, brief: bool = False) -> dict[str, Any]:
        """The counters; with `log`, also each prompt key's generations as [rid, wall time] pairs (where a duplicate
        across servers came from). With `brief`, the totals alone: none of the maps by prompt key or rid, which grow
        with every prompt served (~25 MB of JSON after 100K prompts)."""
        if brief:
            return {k: v for k, v in self.snapshot().items() if k not in BY_PROMPT}
        return ({"generation_log": self.log} if log else {}) | {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "responses": self.responses,
            "generations_total": sum(self.generations.values()),
            "generations": dict(self.generations),
            "generations_by_rid": dict(self.generations_by_rid),
            "duplicate_generations": sum(n - 1 for n in self.generations.values() if n > 1),
            "probes": {"requests": self.probe_requests, "generations": self.probe_generations},
            "cancelled": self.cancelled,
            "faults": dict(self.faults),
            "with_tools": dict(self.with_tools),
            "errors": dict(self.errors),
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "looping": {"generations": self.looping_generations, "tokens": self.looping_tokens},
            "scripted": {"generations": self.scripted_generations, "tokens": self.scripted_tokens},
            "cancelled_tokens": self.cancelled_tokens,
            "spec_by_rid": self.spec_by_rid,
        }
