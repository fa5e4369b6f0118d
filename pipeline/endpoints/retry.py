"""Retry policy as a value: exponential backoff with full jitter, capped, honouring Retry-After."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 0.5
    max_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay_for(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt number `attempt + 1` (attempt counts from 1).

        Full jitter (uniform in [0, min(cap, base * 2**(attempt-1))]) spreads retries of many prompts that failed
        together; a server's Retry-After is a floor, never shortened by jitter.
        """
        ceiling = min(self.max_s, self.base_s * (2 ** max(0, attempt - 1)))
        delay = self.rng.uniform(0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_s))
        return delay
