"""The HTTP client under every request regen sends: aiohttp's, configured for a day-long job against SGLang.

regen owns no HTTP framing. aiohttp parses status lines, headers, chunked and Content-Length bodies, pipelined
leftovers and gzip; this module only chooses its settings and keeps the few behaviours a long generation job needs:
- **Keep-alive shorter than the server's.** SGLang's HTTP server closes a connection idle for 5 s (uvicorn's
  `timeout_keep_alive`, python/sglang/srt/entrypoints/http_server.py); idle connections are closed here after 4 s.
- **A stale connection costs nothing.** A server (or a gateway) may close a kept-alive connection without saying
  so. A request whose connection is closed or reset before the first byte of its response is sent once more, on a
  fresh connection (`_fresh`, a pool that never reuses). On a stale connection the server never read it, so this is
  not a second generation, and it is not an endpoint failure. Whether the failed connection was a reused one is not
  asked (aiohttp tells it only through its tracing hooks, ~8% of the client's CPU per request): a fresh one that
  fails so belongs to a dying server, and the retry's connect then fails too, which is what marks it down.
- **Names are looked up again.** Answers are cached 10 s, and dropped when a connect to the name fails: a restarted
  Kubernetes pod behind the same name is found at its new address on the next connect.
- **Happy Eyeballs** (RFC 8305, aiohttp's): when a name has several addresses and the first one drops SYNs, the next
  is tried after 250 ms instead of after the whole connect timeout.
- **No redirects.** A 3xx is returned as it is; `failures.raise_for_status` makes it a fatal "the URL redirects to".
- **Proxies follow the environment** (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`, as curl, httpx and requests do), for
  the run and preflight alike: both go through this module and `proxy_for`, which also keeps loopback hosts direct.
  The run warns at start for each endpoint a proxy applies to.

Three timeouts, each named in the error it raises (`Timeouts`): `connect` (opening a socket), `stall` (no byte of a
response for that long; streams only) and `total` (the whole request).
"""

from __future__ import annotations

import functools
import ipaddress
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver
from multidict import CIMultiDictProxy

from . import failures

Resolver = AbstractResolver  # the seam for name lookups (tests answer names themselves)
KEEPALIVE_S = 4.0
DNS_TTL_S = 10
HAPPY_EYEBALLS_DELAY_S = 0.25
FRESH_CONNECTIONS = 16  # the pool of the one retry on a fresh connection: stale sockets are rare and come alone
USER_AGENT = "regen"


@dataclass(frozen=True)
class Timeouts:
    """How long each phase of one request may take (seconds; None: no bound for that phase)."""

    connect: float
    total: float | None = None
    stall: float | None = None

    @functools.cached_property
    def client_timeout(self) -> aiohttp.ClientTimeout:
        # sock_read bounds the wait for each read, headers included: a stall, not a slow generation, when set.
        return aiohttp.ClientTimeout(total=self.total, sock_connect=self.connect, sock_read=self.stall)


@dataclass(frozen=True)
class Reply:
    """One whole response."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


class Transport:
    """One server's connections (its base URL): a keep-alive pool, and a pool for the one retry of a request that
    met a stale connection. `limit` bounds open connections (0: none; the endpoint pool bounds generations)."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        connect_timeout_s: float,
        limit: int = 0,
        resolver: Resolver | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        self._headers = {"User-Agent": USER_AGENT, **headers}
        self._limit, self._resolver = limit, resolver
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._proxy = proxy_for(self.base_url)  # the environment's, read once: `proxy_for` is the one policy

    async def __aenter__(self) -> Transport:
        self._session = self._open(keep_alive=True, limit=self._limit)
        self._fresh = self._open(keep_alive=False, limit=FRESH_CONNECTIONS)
        return self

    def _open(self, *, keep_alive: bool, limit: int) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=limit,
            limit_per_host=0,
            force_close=not keep_alive,
            keepalive_timeout=KEEPALIVE_S if keep_alive else None,
            ttl_dns_cache=DNS_TTL_S,
            happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY_S,
            resolver=self._resolver,
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers=self._headers,
            trust_env=False,  # proxies come from `proxy_for`, per request; no ~/.netrc credentials
            auto_decompress=True,
        )

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None

    @property
    def closed(self) -> bool:
        return self._session is None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        timeouts: Timeouts,
        on_chunk: Callable[[bytes], None] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """Send one request and read its whole response. Failures are raised as regen's errors
        (`failures.from_exception`); any status is returned as it is (`failures.raise_for_status` judges it).
        `on_chunk` sees each piece of the body as it arrives (a streamed completion)."""
        if self._session is None or self._fresh is None:
            raise RuntimeError(f"{self.base_url}: transport used outside `async with` (or after close)")
        try:
            return await self._send(self._session, method, path, body, timeouts, on_chunk, extra_headers, stale=True)
        except _Stale:
            return await self._send(self._fresh, method, path, body, timeouts, on_chunk, extra_headers, stale=False)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        body: bytes | None,
        timeouts: Timeouts,
        on_chunk: Callable[[bytes], None] | None,
        extra_headers: Mapping[str, str] | None,
        *,
        stale: bool,
    ) -> Reply:
        """One exchange; `stale`: raise _Stale for a connection closed before the response began."""
        url = self.base_url + path
        answered = False
        try:
            async with session.request(
                method,
                url,
                data=body,
                headers=extra_headers,
                timeout=timeouts.client_timeout,
                allow_redirects=False,
                proxy=self._proxy,
            ) as resp:
                answered = True
                if on_chunk is None:
                    data = await resp.read()
                else:
                    parts: list[bytes] = []
                    try:
                        async for piece in resp.content.iter_any():
                            parts.append(piece)
                            on_chunk(piece)
                    except BaseException:
                        # A reader that stops early (the loop guard, a stall): close the connection now. Leaving
                        # the block only hands it back to aiohttp, which may keep the socket; a server without
                        # /abort_request (vLLM) stops a request when its stream closes, and only then.
                        resp.close()
                        raise
                    data = b"".join(parts)
                return Reply(resp.status, resp.headers, data)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            if stale and not answered and failures.is_stale(exc):
                raise _Stale from exc
            if isinstance(exc, aiohttp.ClientConnectorError):
                self._forget(exc.host, exc.port)
            raise failures.from_exception(exc, self.base_url, timeouts, answered=answered) from exc

    def _forget(self, host: str, port: int | None) -> None:
        """Drop what both pools know of a name whose address refused a connect: a pod restarted behind it."""
        for session in (self._session, self._fresh):
            if session is not None and isinstance(session.connector, aiohttp.TCPConnector):
                session.connector.clear_dns_cache(host, port)


class _Stale(Exception):
    """The connection closed before any byte of the response: a stale one, whose server never read the request."""


def proxy_for(url: str) -> str | None:
    """The proxy the environment sends requests to `url` through (`HTTP_PROXY`/`HTTPS_PROXY`, unless `NO_PROXY`
    names the host); None when the request goes direct. A loopback host always goes direct: the proxy's loopback is
    not this machine's (the embedded simulator, a server on this node)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or not host or _loopback(host) or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def shown(proxy: str) -> str:
    """A proxy URL without its credentials, for messages."""
    p = urlsplit(proxy)
    netloc = (p.hostname or "") + (f":{p.port}" if p.port else "")
    return urlunsplit((p.scheme, netloc, p.path, "", ""))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
