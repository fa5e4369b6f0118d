"""The control plane of preflight: one httpx client per server for small GETs and the probe, and its retries.

Transport failures become our errors here and only here: a name that does not resolve (`UnresolvedHost`), a closed
port (`EndpointDownError`: SGLang binds its port only after loading its weights), timeouts and resets
(`RetryableRequestError`). httpx, not the run's transport (endpoints/http1.py): a few requests per server at start.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from ..config import ClientConfig
from ..endpoints.retry import RetryPolicy
from ..errors import EndpointDownError, RetryableRequestError

Sleep = Callable[[float], Awaitable[None]]


class Control:
    """Small GETs and one probe POST to one server; transport failures become our errors here and only here."""

    def __init__(self, url: str, client: ClientConfig, api_key: str | None):
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(connect=client.connect_timeout_s, read=60.0, write=30.0, pool=30.0)
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=2)
        # Plain-HTTP endpoints need no CA bundle: loading one costs ~0.15 s per client, at every start.
        verify = not self.url.startswith("http://")
        self.http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, limits=limits, verify=verify)

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            if _is_dns_failure(exc):
                raise UnresolvedHost(f"cannot resolve host {self.http.base_url.host!r} ({exc})") from None
            raise EndpointDownError(f"{self.url}: port closed ({exc})") from None
        except httpx.TimeoutException as exc:
            raise RetryableRequestError(f"{self.url}{path}: timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise RetryableRequestError(f"{self.url}{path}: {type(exc).__name__}: {exc}") from None

    async def json(self, path: str) -> tuple[int, Any]:
        """(status, parsed body or None) for a GET."""
        resp = await self.request("GET", path)
        try:
            return resp.status_code, resp.json() if resp.content else None
        except ValueError:
            return resp.status_code, None


class UnresolvedHost(EndpointDownError):
    """The host name does not resolve: a typo or a node that is gone, not a server still loading its weights."""


def _is_dns_failure(exc: BaseException) -> bool:
    """Whether a connect error comes from name resolution (socket.gaierror somewhere in its chain)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@asynccontextmanager
async def control_plane(url: str, client: ClientConfig, api_key: str | None) -> AsyncIterator[Control]:
    ctl = Control(url, client, api_key)
    async with ctl.http:
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
