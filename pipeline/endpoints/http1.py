"""The transport under every request to a server: keep-alive HTTP/1.1 connections on asyncio protocols.

Why not aiohttp's client: measured on one pinned core, its request path costs ~0.13 CPU-s per 1,000 requests of the
~0.2 a bare aiohttp loop spends in all (BENCHMARKS.md, "A leaner transport"): request and response objects,
header multidicts, tracing hooks and a timer per phase. regen sends one kind of request to servers it knows (SGLang
and its router): a small JSON body out, a JSON body or an SSE stream back. So this module keeps connections and
waits, and leaves parsing HTTP to httptools (the llhttp parser under uvicorn): status, headers, Content-Length,
chunked bodies, keep-alive. No redirects, cookies, proxies or compression: regen asks for none.

`ConnectionPool` holds one origin's idle connections (last used first) and, for the control plane, a bound on how
many are open. `fetch` returns a whole response; with `stall_s` it gives up (TimeoutError) once no byte has come for
that long, however long the whole response takes: a streamed response is watched as it arrives, by one timer per
`stall_s` rather than one wake-up per read, and its body is handed over whole. A connection whose response was not
read to its end (cancelled, timed out) is closed, never reused. `timeout_s` bounds a whole response by the same
timer (an `asyncio.timeout` per request cost ~2% of regen's CPU).

Errors: `ConnectFailed` (no connection could be opened; `os_error` says why), `ConnectionLost` (closed before the
response ended), `BadResponse` (bytes the parser refuses), and TimeoutError for a stalled read or a connect that
took over `connect_timeout_s`. `client.py` maps them to regen's errors, in one place.
"""

from __future__ import annotations

import asyncio
import functools
import math
import socket
import ssl
import time
from typing import cast
from urllib.parse import urlsplit

import httptools

USER_AGENT = b"regen"
DNS_TTL_S = 300.0
# SGLang's HTTP server closes a connection idle for 5 s (uvicorn's timeout_keep_alive in
# python/sglang/srt/entrypoints/http_server.py). A request sent on one just as it closes fails as a lost
# connection, so connections idle longer than this are closed here first, not reused.
MAX_IDLE_S = 4.0


class TransportError(Exception):
    """A request that got no complete response. Subclasses say at which step."""


class ConnectFailed(TransportError):
    def __init__(self, os_error: OSError):
        super().__init__(str(os_error))
        self.os_error = os_error


class ConnectionLost(TransportError):
    """The server closed (or reset) the connection before the response ended."""


class BadResponse(TransportError):
    """Bytes that are not an HTTP/1.1 response."""


class Response:
    """One response as it arrives: status and headers, then the body, handed over whole (`body`) once complete."""

    __slots__ = ("_error", "_parts", "_waiter", "body", "complete", "headers", "keep_alive", "last_byte_at", "status")

    def __init__(self, now: float) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}  # names lower-cased
        self.body = b""
        self.complete = False  # the whole body is in
        self.keep_alive = False
        self.last_byte_at = now  # loop time of the last read (or of sending the request)
        self._parts: list[bytes] = []
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def header(self, name: str) -> str | None:
        value = self.headers.get(name.lower().encode("latin-1"))
        return None if value is None else value.decode("latin-1")

    async def read(self, stall_s: float | None = None, deadline: float | None = None) -> bytes:
        """Wait for the whole body; TimeoutError once no byte has come for `stall_s`, or at loop time `deadline`."""
        if not self.complete and self._error is None:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            watch = None if stall_s is None and deadline is None else _Watch(loop, self, waiter, stall_s, deadline)
            try:
                await waiter
            finally:
                self._waiter = None
                if watch is not None:
                    watch.cancel()
        if self._error is not None:
            raise self._error
        self.body = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        self._parts = []
        return self.body

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if not self.complete and self._error is None:
            self._error = error
            self._wake()


class _Watch:
    """Fails `waiter` with TimeoutError once `resp` has had no byte for `stall_s` or at `deadline` (loop time),
    whichever comes first: one timer at a time (cheaper than an `asyncio.timeout` per request), re-armed for the
    rest of the window after each firing that finds a recent byte."""

    __slots__ = ("deadline", "handle", "loop", "resp", "stall_s", "waiter")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        resp: Response,
        waiter: asyncio.Future[None],
        stall_s: float | None,
        deadline: float | None,
    ):
        self.loop, self.resp, self.waiter = loop, resp, waiter
        self.stall_s, self.deadline = stall_s, math.inf if deadline is None else deadline
        self.handle = loop.call_at(self._due(), self._check)

    def _due(self) -> float:
        return min(self.deadline, math.inf if self.stall_s is None else self.resp.last_byte_at + self.stall_s)

    def _check(self) -> None:
        if self.waiter.done():
            return
        due, now = self._due(), self.loop.time()
        if now >= self.deadline:
            self.waiter.set_exception(TimeoutError("no complete response before the deadline"))
        elif now >= due:
            self.waiter.set_exception(TimeoutError(f"no bytes for {self.stall_s}s"))
        else:
            self.handle = self.loop.call_at(due, self._check)

    def cancel(self) -> None:
        self.handle.cancel()


def _until_close(resp: Response) -> bool:
    return b"content-length" not in resp.headers and b"chunked" not in resp.headers.get(b"transfer-encoding", b"")


class _Connection(asyncio.Protocol):
    """One socket and its parser; httptools calls the `on_*` methods as it parses what `data_received` gets."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.lost = False
        self.idle_since = 0.0  # loop time it went back to the pool
        self._headers: dict[bytes, bytes] = {}
        self._time = asyncio.get_running_loop().time

    def send(self, data: bytes) -> Response:
        assert self.transport is not None
        self.response, self._headers = Response(self._time()), {}
        self.transport.write(data)
        return self.response

    @property
    def reusable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol --------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        resp = self.response
        if resp is None or resp.complete:  # bytes nobody asked for: the connection cannot be trusted again
            self.close()
            return
        resp.last_byte_at = self._time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            resp._fail(BadResponse(f"{type(exc).__name__}: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        resp = self.response
        if resp is not None and resp.status and not resp.complete and exc is None and _until_close(resp):
            resp.complete = True  # a body without a length or chunks ends where the connection does
            resp._wake()
        elif resp is not None:
            why = f"{type(exc).__name__}: {exc}" if exc else "closed by the server"
            resp._fail(ConnectionLost(why))

    # -- httptools callbacks -----------------------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        resp = self.response
        assert resp is not None
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim response (regen never sends Expect); the real one follows
            self._headers = {}
            return
        resp.status, resp.headers = status, self._headers
        resp.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        resp = self.response
        assert resp is not None
        resp._parts.append(body)

    def on_message_complete(self) -> None:
        resp = self.response
        assert resp is not None
        if not resp.status:  # the end of an interim response
            return
        resp.complete = True
        resp._wake()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying context for the process: loading the CA bundle costs ~0.15 s, and each endpoint has two pools."""
    return ssl.create_default_context()


class ConnectionPool:
    """Keep-alive connections to one origin (`http://host:port[/prefix]`, or https), reused last-used first.

    `max_connections` bounds the connections open at once (requests beyond it wait for one); None leaves the
    bound to the caller (the endpoint pool's capacity, for generations). `headers` go on every request.
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float,
        max_connections: int | None = None,
        headers: dict[str, str] | None = None,
        max_idle_s: float = MAX_IDLE_S,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/").encode()
        self.ssl = _tls_context() if parts.scheme == "https" else None
        self.connect_timeout_s, self.max_idle_s = connect_timeout_s, max_idle_s
        netloc = parts.netloc.rpartition("@")[2]
        fixed = {"Host": netloc, "User-Agent": USER_AGENT.decode(), **(headers or {})}
        self._fixed = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode("latin-1")) for k, v in fixed.items())
        self._limit = asyncio.Semaphore(max_connections) if max_connections else None
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._addresses: tuple[float, list[tuple[str, int]]] | None = None
        self._closed = False

    async def fetch(
        self,
        method: bytes,
        path: bytes,
        body: bytes | None = None,
        *,
        stall_s: float | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        """Send one request and read its whole response (`Response.body`). TimeoutError once no byte has come for
        `stall_s` (from sending the request, then from each read), or `timeout_s` after the call (a connect counts
        against `connect_timeout_s` only, a wait for a connection under `max_connections` against nothing)."""
        if self._closed:
            raise RuntimeError("ConnectionPool used after close")
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        if self._limit is not None:
            await self._limit.acquire()
        try:
            conn = await self._checkout()
            resp = conn.send(self._request(method, path, body))
            try:
                await resp.read(stall_s, deadline)
            finally:
                self._checkin(conn, resp)  # (closed unless read to its end: cancelled, timed out)
        finally:
            if self._limit is not None:
                self._limit.release()
        return resp

    async def close(self) -> None:
        self._closed = True
        for conn in [*self._idle, *self._busy]:
            conn.close()
        self._idle.clear()

    # -- connections -------------------------------------------------------------------------------------------------
    def _request(self, method: bytes, path: bytes, body: bytes | None) -> bytes:
        head = b"%s %s%s HTTP/1.1\r\n%s" % (method, self.prefix, path, self._fixed)
        if body is None:
            return head + b"\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body

    async def _checkout(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable and conn._time() - conn.idle_since < self.max_idle_s:
                self._busy.add(conn)
                return conn
            conn.close()
        conn = await self._connect()
        self._busy.add(conn)
        return conn

    def _checkin(self, conn: _Connection, resp: Response) -> None:
        """Back to the idle list if its response was read to the end and the server keeps it open; else closed."""
        self._busy.discard(conn)
        conn.response = None
        if resp.complete and resp.keep_alive and conn.reusable and not self._closed:
            conn.idle_since = conn._time()
            self._idle.append(conn)
        else:
            conn.close()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.connect_timeout_s):
            addresses = await self._resolve()
            error: OSError | None = None
            for host, port in addresses:
                try:
                    _, conn = await loop.create_connection(
                        _Connection, host, port, ssl=self.ssl, server_hostname=self.host if self.ssl else None
                    )
                    return conn
                except OSError as exc:  # refused, unreachable: try the host's next address
                    error = exc
            raise ConnectFailed(error or OSError(f"no address for {self.host}"))

    async def _resolve(self) -> list[tuple[str, int]]:
        """The origin's addresses, looked up once per DNS_TTL_S (not once per connection: a run opens hundreds)."""
        now = time.monotonic()
        if self._addresses is not None and now - self._addresses[0] < DNS_TTL_S:
            return self._addresses[1]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ConnectFailed(exc) from None
        addresses = [(str(info[4][0]), int(info[4][1])) for info in infos]
        self._addresses = (now, addresses)
        return addresses
