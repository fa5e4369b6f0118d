"""Endpoint health: probe down endpoints back in, catch hung ones, and retire ones whose configuration changed.

A hung server (a frozen process, a wedged scheduler) still accepts connections, so no request error reveals it
while generations legitimately take many minutes. The monitor probes `/health` of every live endpoint on an
interval; after `health_failures` consecutive failed probes the endpoint is marked down and its in-flight
requests are cancelled, so their prompts go to other endpoints without using up their attempts. A down endpoint
is probed with backoff, but never less often than every `down_probe_s` (the control interval: a fifth of the
health interval, at most 2 s; a refused `/health` costs nothing), so one that answers again is back in the pool
within seconds, however long it was away. When it answers, it is re-checked against the configuration it had at
preflight (an endpoint that restarted with different server args is retired for the rest of the run), then
half-opened by the pool and ramped up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from ..errors import RegenError
from .pool import Pool
from .retry import control_interval_s
from .state import DOWN, DRAINING, RETIRED, EndpointState

Verify = Callable[[EndpointState], Awaitable[str | None]]  # None: fine; else why it must be retired


# What `verify` answers for an endpoint that is not ready yet (probe again later) rather than misconfigured.
NOT_YET = ("still unreachable", "still warming up")


class HealthMonitor:
    def __init__(
        self,
        pool: Pool,
        *,
        interval_s: float = 10.0,
        timeout_s: float = 20.0,
        failures: int = 3,
        verify: Verify | None = None,
        recheck_interval_s: float = 60.0,
        on_event: Callable[[str], None] = lambda message: None,
        clock: Callable[[], float] = time.monotonic,
        down_probe_s: float | None = None,
    ):
        self.pool = pool
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.failures = failures
        self.verify = verify
        self.recheck_interval_s = recheck_interval_s
        self.down_probe_s = control_interval_s(interval_s) if down_probe_s is None else down_probe_s
        self._verified: dict[str, float] = {}
        self.on_event = on_event
        self.clock = clock
        self._last: dict[str, float] = {}
        self._missed: dict[str, int] = {}

    async def run(self) -> None:
        """Probe every endpoint when it is due, each on its own: a frozen server's slow probe delays no other."""
        probing: set[str] = set()
        async with asyncio.TaskGroup() as tg:
            while True:
                await asyncio.sleep(min(0.5, self.interval_s, self.down_probe_s / 2))
                for ep in self.pool.endpoints:
                    if ep.url not in probing and self._due(ep):
                        probing.add(ep.url)
                        tg.create_task(self._probe(ep, probing))

    async def _probe(self, ep: EndpointState, probing: set[str]) -> None:
        try:
            await self.check(ep)
        finally:
            probing.discard(ep.url)

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
            await ep.client.check_health(timeout_s=self.timeout_s)
        except RegenError as exc:
            self._failed(ep, f"/health failed: {exc}", was_down)
            return
        self._missed[ep.url] = ep.probe_failures = 0
        # The first healthy probe starts the clock (the gate verified the endpoint when it admitted it).
        due = self.clock() - self._verified.setdefault(ep.url, self.clock()) >= self.recheck_interval_s
        if was_down or due:
            self._verified[ep.url] = self.clock()
            if not await self._still_valid(ep):
                return
        if was_down:
            self.pool.mark_up(ep)
            self.on_event(f"{ep.url}: healthy, in the pool")
            await self.pool.notify()

    def _failed(self, ep: EndpointState, why: str, was_down: bool) -> None:
        if was_down:
            self.pool.probe_failed(ep, why, max_wait_s=self.down_probe_s)
            return
        self._missed[ep.url] = missed = self._missed.get(ep.url, 0) + 1
        self.pool.probe_missed(ep, why, missed)
        if missed >= self.failures:
            self._missed[ep.url] = 0
            n = self.pool.kill(ep, f"{missed} health probes failed ({why})")
            self.on_event(f"{ep.url}: marked down after {missed} failed health probes; {n} requests moved elsewhere")

    async def _still_valid(self, ep: EndpointState) -> bool:
        """Re-check the endpoint's configuration (preflight, or its /server_info fingerprint)."""
        if self.verify is None:
            return True
        why = await self.verify(ep)
        if why is None:
            return True
        if why in NOT_YET:
            self.pool.probe_failed(ep, why, max_wait_s=self.down_probe_s)
            return False
        n = self.pool.kill(ep, why)  # its in-flight requests (if any) move to other endpoints
        self.pool.retire(ep, why)
        self.on_event(f"{ep.url}: removed from the pool: {why} ({n} requests moved elsewhere)")
        return False
