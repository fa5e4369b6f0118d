"""Fill each server's batch by itself: size an automatic endpoint's concurrency from what the server reports.

An endpoint with `concurrency = 0` starts from the capacity its server advertises at preflight (the effective
max_running_requests, after SGLang's mamba-cache cap: docs/sglang-versions.md). While the run goes, the sizer reads
`/v1/loads` (running and waiting requests, and per DP rank `max_running_requests`, which SGLang reports after the
same cap: `managers/scheduler.py`'s `max_running_requests`, not the launch flag) and moves the
endpoint's capacity toward "every decode slot busy plus a small queue", so the server's batch refills the moment
a request finishes without a long queue that would only add latency.

Workers share servers fairly without talking to each other. The server's `/v1/loads` counts every client's
requests; a worker knows its own (`ep.inflight`). So its share is what the server can take beyond the others':

    target  = max_running + queue              (queue: 10% of max_running, at least 2 and workers - 1)
    share   = target - (running + waiting - own in flight)

A worker shrinks to its share at once (never more in flight than the server holds plus the small queue, however
many workers run), and grows toward it by 1/(num_workers + 1) of the gap per round, so workers that all see the
same free room do not all take it (n workers growing together add at most n/(n+1) of the room there was). A
worker that finishes early sends nothing more, the server's load drops, and the others grow into its share. At
start, before any load is read, each worker takes 1/num_workers of the full batch the server advertises (gate.py).
The figures are a moment's: a read taken while another worker is between two requests (one answered, the next not
yet sent) shows room that is not there. Two workers that both read such a moment each grow by one, so the server
can hold one request per worker above the target until their next reads shrink them (seen in
tests/integration/test_fair_share.py in 3 of ~30 runs on short requests; at real durations those gaps
are a far smaller part of a request).

The sizer reads every control interval (`retry.control_interval_s`: a fifth of `client.health_interval_s`, at most
2 s), so a run whose timeouts are scaled down reads as often relative to a request as a real one. An endpoint whose
server refused a request for load (HTTP 503 queue full) since the last read is not grown: the pool lowered its
capacity to what the server took (pool.py), and growing it straight back would only be refused again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..config import EndpointConfig
from ..errors import RegenError
from .pool import Pool
from .retry import control_interval_s
from .state import DEGRADED, HEALTHY, EndpointState

QUEUE_SHARE = 0.1
MIN_QUEUE = 2
AUTO_DEFAULT = 64  # capacity of a concurrency-0 endpoint whose server advertises none


def capacity_of(spec: EndpointConfig) -> tuple[int, bool]:
    """(initial capacity, whether it is automatic)."""
    return (spec.concurrency, False) if spec.concurrency > 0 else (AUTO_DEFAULT, True)


def full_batch(max_running: int, workers: int = 1) -> int:
    """Requests a server should hold: every decode slot busy plus a small queue (10%, at least 2, and at least
    workers - 1, so that workers growing one slot at a time still fill every slot; see target_capacity)."""
    return max_running + max(MIN_QUEUE, int(max_running * QUEUE_SHARE), workers - 1)


def target_capacity(
    capacity: int,
    loads: dict[str, Any],
    *,
    inflight: int | None = None,
    workers: int = 1,
) -> int:
    """The next capacity for an endpoint whose server reported `loads` (the /v1/loads body), given this worker's
    own requests in flight there (None: as many as its capacity) and how many workers may share it. Pure."""
    ranks = loads.get("loads") or []
    max_running = sum(int(r.get("max_running_requests") or 0) for r in ranks)
    if max_running <= 0:
        return capacity
    load = sum(int(r.get("num_running_reqs") or 0) + int(r.get("num_waiting_reqs") or 0) for r in ranks)
    target = full_batch(max_running, workers)
    own = min(capacity, load) if inflight is None else inflight
    others = max(0, load - own)
    share = target - others  # what the server takes beyond the other clients' requests
    if share <= capacity:
        return max(1, share)
    # Grow by a share of the room: the server's figures lag what was just sent, and the other workers see the
    # same room (n workers growing together take at most n/(n+1) of it).
    room, n = share - capacity, max(1, workers)
    step = room // (n + 1) or (1 if room >= n else 0)  # +1 each only when n workers all taking it still fits
    return capacity + step


class Autosizer:
    def __init__(
        self,
        pool: Pool,
        *,
        interval_s: float | None = None,
        workers: int = 1,
        on_event: Callable[[str], None] = lambda message: None,
    ):
        self.pool = pool
        self._interval_s = interval_s  # None: the control interval of the endpoints' client config
        self.workers = workers
        self.on_event = on_event

    @property
    def interval_s(self) -> float:
        if self._interval_s is not None:
            return self._interval_s
        return min((control_interval_s(ep.client.cfg.health_interval_s) for ep in self.pool.endpoints), default=2.0)

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
        new = target_capacity(ep.capacity, loads, inflight=ep.inflight, workers=self.workers)
        if new > ep.capacity and self.pool.pushed_back_within(ep, self.interval_s):
            return  # refused for load since the last read: no growth yet
        if new != ep.capacity:
            ep.capacity, ep.capacity_source = new, "adjusted from /v1/loads"
