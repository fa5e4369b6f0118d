"""Endpoint health: probe down endpoints back in, catch hung ones, and retire ones whose configuration changed.

A hung server (a frozen process, a wedged scheduler) still accepts connections, so no request error reveals it
while generations legitimately take many minutes. The monitor probes `/health` of every live endpoint on an
interval; after `health_failures` consecutive failed probes the endpoint is marked down and its in-flight
requests are cancelled, so their prompts go to other endpoints without using up their attempts. A down endpoint
is probed with backoff and, when it answers again, re-checked against the configuration it had at preflight: an
endpoint that restarted with different server args is retired for the rest of the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import RegenError
from .pool import DOWN, DRAINING, RETIRED, EndpointState, Pool

Fingerprint = Callable[[EndpointState], Awaitable[dict[str, Any]]]


class HealthMonitor:
    def __init__(
        self,
        pool: Pool,
        *,
        interval_s: float = 10.0,
        timeout_s: float = 20.0,
        failures: int = 3,
        fingerprint: Fingerprint | None = None,
        on_event: Callable[[str], None] = lambda message: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.pool = pool
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.failures = failures
        self.fingerprint = fingerprint
        self.on_event = on_event
        self.clock = clock
        self.expected: dict[str, dict[str, Any]] = {}  # url → fingerprint at admission
        self._last: dict[str, float] = {}
        self._missed: dict[str, int] = {}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(0.5, self.interval_s))
            due = [ep for ep in self.pool.endpoints if self._due(ep)]
            if due:
                await asyncio.gather(*(self.check(ep) for ep in due))

    def _due(self, ep: EndpointState) -> bool:
        if ep.state in (RETIRED, DRAINING):
            return False
        if ep.state == DOWN:
            return ep.down_until <= self.clock()
        return self.clock() - self._last.get(ep.url, 0.0) >= self.interval_s

    async def check(self, ep: EndpointState) -> None:
        self._last[ep.url] = self.clock()
        was_down = ep.state == DOWN
        try:
            await ep.client.get_json("/health", timeout_s=self.timeout_s)
        except RegenError as exc:
            self._failed(ep, f"/health failed: {exc}", was_down)
            return
        self._missed[ep.url] = 0
        if was_down:
            if await self._same_config(ep):
                self.pool.mark_up(ep)
                self.on_event(f"{ep.url}: healthy again, back in the pool")
            await self.pool.notify()

    def _failed(self, ep: EndpointState, why: str, was_down: bool) -> None:
        if was_down:
            self.pool.mark_down(ep, why)
            return
        self._missed[ep.url] = missed = self._missed.get(ep.url, 0) + 1
        if missed >= self.failures:
            self._missed[ep.url] = 0
            n = self.pool.kill(ep, f"{missed} health probes failed ({why})")
            self.on_event(f"{ep.url}: marked down after {missed} failed health probes; {n} requests moved elsewhere")

    async def _same_config(self, ep: EndpointState) -> bool:
        """An endpoint coming back may have restarted: compare its server args with those it was admitted on."""
        if self.fingerprint is None or ep.url not in self.expected:
            return True
        try:
            now = await self.fingerprint(ep)
        except RegenError as exc:
            self.pool.mark_down(ep, f"server_info failed: {exc}")
            return False
        before = self.expected[ep.url]
        changed = {k: (before.get(k), now.get(k)) for k in set(before) | set(now) if before.get(k) != now.get(k)}
        if not changed:
            return True
        detail = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in sorted(changed.items()))
        self.pool.retire(ep, f"restarted with a different configuration ({detail})")
        self.on_event(f"{ep.url}: removed from the pool: restarted with a different configuration: {detail}")
        return False
