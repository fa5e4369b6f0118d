"""Counters and rates of one run. No printing: the CLI draws them, the runner writes them to RUN_DIR/metrics/."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any


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
    last_errors: deque[str] = field(default_factory=lambda: deque(maxlen=10))
    started: float = field(default_factory=time.monotonic)
    _window: deque[tuple[float, int, int]] = field(default_factory=lambda: deque(maxlen=120))

    @property
    def done(self) -> int:
        return self.accepted + self.rejected

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

    def record_error(self, message: str) -> None:
        self.last_errors.append(message)

    def tick(self, now: float | None = None) -> None:
        """Remember a point for the recent-rate window (called about once a second)."""
        self._window.append((now if now is not None else time.monotonic(), self.done, self.output_tokens))

    def rates(self) -> dict[str, float]:
        now = time.monotonic()
        elapsed = max(1e-9, now - self.started)
        out = {"completions_per_s": self.done / elapsed, "output_tokens_per_s": self.output_tokens / elapsed}
        if len(self._window) >= 2:
            (t0, d0, k0), (t1, d1, k1) = self._window[0], self._window[-1]
            span = max(1e-9, t1 - t0)
            out["recent_completions_per_s"] = (d1 - d0) / span
            out["recent_output_tokens_per_s"] = (k1 - k0) / span
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "t": time.time(),
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
            "elapsed_s": time.monotonic() - self.started,
            "last_errors": list(self.last_errors),
            **self.rates(),
        }
