"""Fill each server's batch by itself: size an automatic endpoint's concurrency from what the server reports.

An endpoint with `concurrency = 0` starts from the capacity its server advertises at preflight (the effective
max_running_requests, after SGLang's mamba-cache cap: docs/sglang-versions.md). While the run goes, the sizer reads
`/v1/loads` (running and waiting requests, and per DP rank `max_running_requests`, which SGLang reports after the
same cap: `managers/scheduler.py`'s `max_running_requests`, not the launch flag) and moves the
endpoint's capacity toward "every decode slot busy plus a small queue", so the server's batch refills the moment
a request finishes without a long queue that would only add latency. When the server's queue holds more than that
small queue (another client shares the server, or the server runs fewer requests than it says), regen backs off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..errors import RegenError
from .pool import DEGRADED, HEALTHY, EndpointState, Pool


def target_capacity(capacity: int, loads: dict[str, Any], *, queue_share: float = 0.1, min_queue: int = 2) -> int:
    """The next capacity for an endpoint whose server reported `loads` (the /v1/loads body). Pure."""
    ranks = loads.get("loads") or []
    max_running = sum(int(r.get("max_running_requests") or 0) for r in ranks)
    if max_running <= 0:
        return capacity
    waiting = sum(int(r.get("num_waiting_reqs") or 0) for r in ranks)
    queue = max(min_queue, int(max_running * queue_share))
    ideal = max_running + queue
    if waiting > queue:  # more is queued than we want to keep there: the excess is not ours to add to
        ideal = min(ideal, capacity - (waiting - queue))
    step = (ideal - capacity) / 2  # halfway each round: the server's figures lag behind what we send
    return max(1, capacity + (int(step) if abs(step) >= 1 else ideal - capacity))


class Autosizer:
    def __init__(self, pool: Pool, *, interval_s: float = 2.0, on_event: Callable[[str], None] = lambda message: None):
        self.pool = pool
        self.interval_s = interval_s
        self.on_event = on_event

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            live = [ep for ep in self.pool.endpoints if ep.auto_capacity and ep.state in (HEALTHY, DEGRADED)]
            if live:
                await asyncio.gather(*(self.resize(ep) for ep in live))
                await self.pool.notify()

    async def resize(self, ep: EndpointState) -> None:
        try:
            loads = await ep.client.get_json("/v1/loads", timeout_s=min(5.0, self.interval_s * 2))
        except RegenError:
            return  # an old server or a router without /v1/loads: keep the advertised capacity
        if not isinstance(loads, dict):
            return
        new = target_capacity(ep.capacity, loads)
        if new != ep.capacity:
            ep.capacity, ep.capacity_source = new, "adjusted from /v1/loads"
