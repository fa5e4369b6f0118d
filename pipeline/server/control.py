"""The control plane of preflight: one small transport per server for GETs and the probe, and its retries.

Requests go through the run's own client (endpoints/transport.py, aiohttp) and its one failure map
(endpoints/failures.py): a name that does not resolve (`UnresolvedHostError`), a closed port (`EndpointDownError`:
SGLang binds its port only after loading its weights), timeouts and resets (`RetryableRequestError`). Statuses are
returned as they are: preflight reads 401, 404 and 503 as findings, not failures.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson

from ..config import ClientConfig
from ..endpoints.retry import RetryPolicy
from ..endpoints.transport import Reply, Timeouts, Transport
from ..errors import RetryableRequestError, UnresolvedHostError

Sleep = Callable[[float], Awaitable[None]]
UnresolvedHost = UnresolvedHostError  # the name preflight reads it by
CONTROL_TIMEOUT_S = 60.0


class Control:
    """Small GETs and one probe POST to one server, over `transport` (a run's endpoint lends its control-plane
    transport: one client per endpoint, not one per check) or a small one of its own."""

    def __init__(self, url: str, client: ClientConfig, api_key: str | None, transport: Transport | None = None):
        self.url = url.rstrip("/")
        self.connect_timeout_s = client.connect_timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.owned = transport is None
        self.transport = transport or Transport(
            self.url, headers=headers, connect_timeout_s=client.connect_timeout_s, limit=4
        )

    async def request(self, method: str, path: str, *, json: Any = None, timeout_s: float = CONTROL_TIMEOUT_S) -> Reply:
        body = None if json is None else orjson.dumps(json)
        extra = None if json is None else {"Content-Type": "application/json"}
        timeouts = Timeouts(connect=self.connect_timeout_s, total=timeout_s)
        return await self.transport.request(method, path, body=body, timeouts=timeouts, extra_headers=extra)

    async def json(self, path: str) -> tuple[int, Any]:
        """(status, parsed body or None) for a GET."""
        reply = await self.request("GET", path)
        try:
            return reply.status, orjson.loads(reply.body) if reply.body else None
        except orjson.JSONDecodeError:
            return reply.status, None


@asynccontextmanager
async def control_plane(
    url: str, client: ClientConfig, api_key: str | None, transport: Transport | None = None
) -> AsyncIterator[Control]:
    ctl = Control(url, client, api_key, transport)
    if not ctl.owned:
        yield ctl  # the lender closes it
        return
    async with ctl.transport:
        yield ctl


async def retrying(fn: Callable[[], Awaitable[Any]], attempts: int, policy: RetryPolicy, sleep: Sleep) -> Any:
    """Run `fn`, retrying transient failures (timeouts, resets, 5xx) with the run's retry policy."""
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return await fn()
        except RetryableRequestError as exc:
            if attempt >= attempts:
                raise
            await sleep(policy.delay_for(attempt, exc.retry_after))
    raise AssertionError("unreachable")
