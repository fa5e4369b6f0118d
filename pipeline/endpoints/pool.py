"""The endpoint pool: health state, circuit breaker, least-loaded choice, concurrency and rate limits.

Each endpoint is healthy, degraded (recent failures, still used) or down (circuit open: no requests until a
`/health` probe passes). A worker asks the pool for an endpoint; the pool picks the one with the fewest
outstanding requests relative to its capacity and waits while every endpoint is full or down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asyncio_throttle import Throttler

from ..errors import EndpointError, RequestError
from .client import EndpointClient

HEALTHY, DEGRADED, DOWN, DRAINING, RETIRED = "healthy", "degraded", "down", "draining", "retired"


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
    throttler: Throttler | None = None
    api_key_env: str = ""
    auto_capacity: bool = False  # concurrency 0: sized from the server's advertised capacity
    capacity_source: str = "config"
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)  # requests in flight here
    kills: int = 0  # times the pool declared it dead with requests in flight

    def __post_init__(self) -> None:
        if self.rps > 0:
            # asyncio-throttle counts whole requests per period: 2.5 rps = 5 per 2 s, 0.5 rps = 1 per 2 s.
            per, period = (int(self.rps), 1.0) if self.rps >= 1 else (1, 1.0 / self.rps)
            self.throttler = Throttler(rate_limit=per, period=period)

    @property
    def url(self) -> str:
        return self.client.url

    @property
    def usable(self) -> bool:
        return self.state in (HEALTHY, DEGRADED) and self.inflight < self.capacity


class Pool:
    """Endpoint selection and bookkeeping. `failure_threshold` consecutive failures open the circuit."""

    def __init__(
        self,
        endpoints: list[EndpointState],
        *,
        failure_threshold: int = 3,
        max_cooldown_s: float = 30.0,
        no_endpoint_timeout_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.endpoints = endpoints
        self.failure_threshold = failure_threshold
        self.max_cooldown_s = max_cooldown_s
        self.no_endpoint_timeout_s = no_endpoint_timeout_s
        self.clock = clock
        self._changed = asyncio.Condition()

    def _pick(self) -> EndpointState | None:
        best: EndpointState | None = None
        for ep in self.endpoints:
            if ep.usable and (best is None or ep.inflight / ep.capacity < best.inflight / best.capacity):
                best = ep
        return best

    async def acquire(self) -> EndpointState:
        """Wait for an endpoint with a free slot; raise EndpointError when none is usable for too long."""
        deadline = self.clock() + self.no_endpoint_timeout_s
        async with self._changed:
            while (ep := self._pick()) is None:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    raise EndpointError(f"no usable endpoint for {self.no_endpoint_timeout_s:.0f}s: {self.describe()}")
                try:
                    async with asyncio.timeout(min(remaining, 1.0)):
                        await self._changed.wait()
                except TimeoutError:
                    pass
            ep.inflight += 1
        if ep.throttler is not None:
            async with ep.throttler:
                pass
        return ep

    async def release(
        self,
        ep: EndpointState,
        *,
        latency: float | None = None,
        error: RequestError | None = None,
        unused: bool = False,
    ) -> None:
        """Give a slot back, recording the outcome (`unused`: nothing was learned about the endpoint)."""
        ep.inflight -= 1
        if unused:
            pass
        elif error is None:
            ep.ok += 1
            ep.consecutive_failures = 0
            ep.cooldown_s = 1.0
            if ep.state == DEGRADED:
                ep.state = HEALTHY
            if latency is not None:
                ep.latencies.append(latency)
                if len(ep.latencies) > 512:
                    del ep.latencies[:256]
        else:
            ep.errors += 1
            ep.consecutive_failures += 1
            ep.last_error = str(error)
            if ep.state in (HEALTHY, DEGRADED):
                ep.state = DEGRADED
                if ep.consecutive_failures >= self.failure_threshold:
                    self.mark_down(ep, str(error))
        await self.notify()

    def mark_down(self, ep: EndpointState, why: str) -> None:
        if ep.state in (DRAINING, RETIRED):
            return
        ep.state = DOWN
        ep.last_error = why
        ep.down_until = self.clock() + ep.cooldown_s
        ep.cooldown_s = min(self.max_cooldown_s, ep.cooldown_s * 2)

    def mark_up(self, ep: EndpointState) -> None:
        """A probe passed: half-open the circuit (degraded; one more failure closes it again)."""
        if ep.state == DOWN:
            ep.state = DEGRADED
            ep.consecutive_failures = self.failure_threshold - 1
            ep.down_until = 0.0

    async def notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def due_for_probe(self) -> list[EndpointState]:
        now = self.clock()
        return [ep for ep in self.endpoints if ep.state == DOWN and ep.down_until <= now]

    def kill(self, ep: EndpointState, why: str) -> int:
        """The endpoint is hung: mark it down and cancel its in-flight requests (they retry elsewhere)."""
        self.mark_down(ep, why)
        ep.kills += 1
        tasks = list(ep.tasks)
        for task in tasks:
            task.cancel(msg="endpoint-down")
        return len(tasks)

    def retire(self, ep: EndpointState, why: str) -> None:
        """Never use this endpoint again in this run (its configuration is not the one that was checked)."""
        ep.state = RETIRED
        ep.last_error = why

    def add(self, ep: EndpointState) -> None:
        self.endpoints.append(ep)

    def drain(self, ep: EndpointState) -> None:
        """Take no new requests; in-flight ones finish."""
        ep.state = DRAINING

    def undrain(self, ep: EndpointState) -> None:
        """A drained endpoint was listed again: probe it before use."""
        ep.state, ep.down_until, ep.cooldown_s = DOWN, 0.0, 1.0

    def describe(self) -> str:
        return "; ".join(f"{ep.url} {ep.state} ({ep.last_error or 'ok'})" for ep in self.endpoints)

    def snapshot(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for ep in self.endpoints:
            lat = sorted(ep.latencies)
            out[ep.url] = {
                "state": ep.state,
                "inflight": ep.inflight,
                "capacity": ep.capacity,
                "capacity_source": ep.capacity_source,
                "ok": ep.ok,
                "errors": ep.errors,
                "latency_p50": lat[len(lat) // 2] if lat else None,
                "latency_p95": lat[int(len(lat) * 0.95)] if lat else None,
                "last_error": ep.last_error,
            }
        return out
