"""One endpoint as the pool sees it: its state (`lifecycle.py`), capacity and ramp, requests in flight, counters for
reports, its failure streak and probe schedule (`breaker.py`) and its push-back episode (`pushback.py`). The pool
(`pool.py`) and those two modules decide; this holds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from asyncio_throttle.throttler import Throttler

from .client import EndpointClient
from .lifecycle import DEGRADED, DOWN, DRAINING, HEALTHY, LIVE, RETIRED
from .retry import Pushback, PushbackPolicy

__all__ = ["DEGRADED", "DOWN", "DRAINING", "HEALTHY", "LIVE", "PUSHBACK_STATUSES", "RETIRED", "EndpointState"]
# A live server refusing for load: SGLang's scheduler answers 503 when its waiting queue is full
# (`managers/scheduler.py::_abort_on_queued_limit`); sglang-router answers 429 (queue full) and 408 (queue timeout).
PUSHBACK_STATUSES = frozenset({408, 429, 503})


@dataclass
class EndpointState:
    client: EndpointClient
    capacity: int
    rps: float = 0.0
    state: str = HEALTHY
    inflight: int = 0
    ok: int = 0
    errors: int = 0
    consecutive_failures: int = 0
    down_until: float = 0.0
    cooldown_s: float = 1.0
    latencies: list[float] = field(default_factory=list)
    last_error: str = ""
    last_error_at: float | None = None  # pool clock
    last_ok_at: float | None = None  # pool clock: the last successful response
    state_since: float | None = None  # pool clock: when `state` last changed
    probe_failures: int = 0  # consecutive failed /health probes while live (a frozen server)
    ramp: int = 0  # 0: full capacity; else the slots a half-open endpoint may use now
    throttler: Throttler | None = None
    api_key_env: str = ""
    auto_capacity: bool = False  # concurrency 0: sized from the server's advertised capacity
    capacity_source: str = "config"
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)  # requests in flight here
    kills: int = 0  # times the pool declared it dead with requests in flight
    pushbacks: int = 0  # requests the server refused for load (it was live)
    pushed_back_at: float | None = None  # pool clock: the last refusal that held it (the autosizer waits to grow it)
    pushback: Pushback = field(init=False)

    def __post_init__(self) -> None:
        self.pushback = Pushback(PushbackPolicy.for_client(self.client.cfg))
        if self.rps > 0:
            # asyncio-throttle counts whole requests per period: 2.5 rps = 5 per 2 s, 0.5 rps = 1 per 2 s.
            per, period = (int(self.rps), 1.0) if self.rps >= 1 else (1, 1.0 / self.rps)
            self.throttler = Throttler(rate_limit=per, period=period)

    @property
    def url(self) -> str:
        return self.client.url

    @property
    def limit(self) -> int:
        """Slots it may use now: its capacity, or fewer while it ramps back up."""
        return min(self.capacity, self.ramp) if self.ramp else self.capacity

    @property
    def usable(self) -> bool:
        return self.state in LIVE and self.inflight < self.limit

    def ramp_to(self, level: int) -> None:
        """Use `level` slots for now, one more per success (`ramp_up`) up to its capacity (at once if it is that)."""
        self.ramp = level if level < self.capacity else 0

    def ramp_up(self) -> None:
        """One more slot after a success while it ramps; full capacity once the ramp reaches it."""
        if self.ramp:
            self.ramp_to(self.ramp + 1)

    def note_error(self, why: str, now: float) -> None:
        """The last error, for reports and exit messages (`now`: the pool's clock)."""
        self.last_error, self.last_error_at = why, now
