"""Counters and rates of one run. No printing: the CLI draws them, the runner writes them to RUN_DIR/metrics/,
and the Prometheus exporter serves them (pipeline/engine/prometheus.py)."""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

COMMIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# SGLang's per-request spec_accept_length: tokens per verify step, the bonus token included (1.0: no draft accepted)
ACCEPT_BUCKETS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)


@dataclass
class Latencies:
    """A fixed-bucket histogram (Prometheus `le` buckets, not cumulative here; the last count is +Inf)."""

    buckets: tuple[float, ...] = COMMIT_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(COMMIT_BUCKETS) + 1))
    sum: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.sum += seconds

    def snapshot(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "counts": list(self.counts), "sum": self.sum}


@dataclass
class Metrics:
    total: int = 0  # prompts this worker owns in the input
    already_done: int = 0  # done before this invocation started
    accepted: int = 0
    rejected: int = 0
    rejected_by_reason: Counter[str] = field(default_factory=Counter)
    output_tokens: int = 0
    requests: int = 0
    retries: int = 0
    endpoint_failures: int = 0
    later_turns: int = 0  # accepted turns after a conversation's first
    later_turns_same_endpoint: int = 0  # of those, the ones served by the endpoint of the turn before (prefix reuse)
    looping: int = 0  # completions judged `looping` (pipeline/loops.py): resampled, or the prompt's last attempt
    loops_stopped: int = 0  # of those, generations the stream guard stopped early (aborted on the server)
    loop_tokens_saved: int = 0  # output tokens they did not generate: max_tokens less what had streamed
    completions_by_endpoint: Counter[str] = field(default_factory=Counter)  # accepted rows stored
    output_tokens_by_endpoint: Counter[str] = field(default_factory=Counter)  # their completion tokens
    commit_seconds: Latencies = field(default_factory=Latencies)  # each journal sync (and the commits it made)
    # The server's speculative acceptance of each stored turn that reported one, by endpoint: a histogram, and the
    # verify steps and tokens behind it (their ratio is the token-weighted acceptance)
    spec_accept: dict[str, Latencies] = field(default_factory=dict)
    spec_verify_steps: Counter[str] = field(default_factory=Counter)
    spec_tokens: Counter[str] = field(default_factory=Counter)
    last_errors: deque[str] = field(default_factory=lambda: deque(maxlen=10))
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)  # wall clock: tells this process's metrics lines apart
    _window: deque[tuple[float, int, int]] = field(default_factory=lambda: deque(maxlen=120))

    @property
    def done(self) -> int:
        return self.accepted + self.rejected

    @property
    def generated(self) -> int:
        """Finished rows less the bad_input ones (refused by the reader, never sent): what rates count."""
        return self.done - self.rejected_by_reason["bad_input"]

    @property
    def pending(self) -> int:
        return max(0, self.total - self.already_done - self.done)

    def record_accept(self, completion_tokens: int | None) -> None:
        self.accepted += 1
        self.output_tokens += completion_tokens or 0

    def record_reject(self, reason: str, completion_tokens: int | None = None) -> None:
        self.rejected += 1
        self.rejected_by_reason[reason] += 1
        self.output_tokens += completion_tokens or 0

    def record_stored(self, row: dict[str, Any]) -> None:
        """An accepted row reached the store: count it for the endpoint that generated it."""
        endpoint = row.get("endpoint") or ""
        self.completions_by_endpoint[endpoint] += 1
        self.output_tokens_by_endpoint[endpoint] += row.get("completion_tokens") or 0
        for turn in row.get("turns") or (row,):
            self._record_spec(turn)

    def _record_spec(self, turn: dict[str, Any]) -> None:
        accept, steps = turn.get("spec_accept_length"), turn.get("spec_verify_ct")
        if accept is None:
            return
        endpoint = turn.get("endpoint") or ""
        if endpoint not in self.spec_accept:
            self.spec_accept[endpoint] = Latencies(ACCEPT_BUCKETS, [0] * (len(ACCEPT_BUCKETS) + 1))
        self.spec_accept[endpoint].observe(accept)
        if steps:
            self.spec_verify_steps[endpoint] += steps
            self.spec_tokens[endpoint] += round(accept * steps)

    def record_later_turn(self, same_endpoint: bool) -> None:
        """A turn after a conversation's first was accepted; `same_endpoint`: where its previous turn went."""
        self.later_turns += 1
        self.later_turns_same_endpoint += same_endpoint

    def record_error(self, message: str) -> None:
        self.last_errors.append(message)

    def tick(self, now: float | None = None) -> None:
        """Remember a point for the recent-rate window (called about once a second)."""
        self._window.append((now if now is not None else time.monotonic(), self.generated, self.output_tokens))

    def rates(self) -> dict[str, float]:
        now = time.monotonic()
        elapsed = max(1e-9, now - self.started)
        out = {"completions_per_s": self.generated / elapsed, "output_tokens_per_s": self.output_tokens / elapsed}
        if len(self._window) >= 2:
            (t0, d0, k0), (t1, d1, k1) = self._window[0], self._window[-1]
            span = max(1e-9, t1 - t0)
            out["recent_completions_per_s"] = (d1 - d0) / span
            out["recent_output_tokens_per_s"] = (k1 - k0) / span
        return out

    def record_looping(self, *, stopped: bool, streamed_tokens: int, max_tokens: int) -> None:
        """A completion judged `looping`; `stopped` when the stream guard ended it after `streamed_tokens`."""
        self.looping += 1
        if stopped:
            self.loops_stopped += 1
            self.loop_tokens_saved += max(0, max_tokens - streamed_tokens)

    def snapshot(self) -> dict[str, Any]:
        return {
            "t": time.time(),
            "started": self.started_at,
            "total": self.total,
            "already_done": self.already_done,
            "done": self.done,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "rejected_by_reason": dict(self.rejected_by_reason),
            "pending": self.pending,
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            "retries": self.retries,
            "endpoint_failures": self.endpoint_failures,
            "later_turns": self.later_turns,
            "later_turns_same_endpoint": self.later_turns_same_endpoint,
            "loops": {"looping": self.looping, "stopped": self.loops_stopped, "tokens_saved": self.loop_tokens_saved},
            "completions_by_endpoint": dict(self.completions_by_endpoint),
            "output_tokens_by_endpoint": dict(self.output_tokens_by_endpoint),
            "commit_seconds": self.commit_seconds.snapshot(),
            "spec_accept_length": {url: h.snapshot() for url, h in self.spec_accept.items()},
            "spec_verify_steps": dict(self.spec_verify_steps),
            "spec_tokens": dict(self.spec_tokens),
            "elapsed_s": time.monotonic() - self.started,
            "last_errors": list(self.last_errors),
            **self.rates(),
        }
