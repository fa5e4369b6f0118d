"""http1.ConnectionPool against real sockets on 127.0.0.1: a scripted server answers each request with raw bytes, so
every framing (Content-Length, chunked, until close, interim 1xx) and every failure (refused, reset mid-response,
stalled, garbage, unresolvable host) is the real thing. Each test runs on asyncio's loop and on uvloop (`regen
run`'s)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from pipeline.endpoints.http1 import BadResponse, ConnectFailed, ConnectionLost, ConnectionPool

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]  # True: keep the connection


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def chunked(*pieces: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    return out + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


class Server:
    """Reads each request (head and Content-Length body) and hands it to `reply`; counts connections."""

    def __init__(self, reply: Reply):
        self.reply, self.connections, self.requests = reply, 0, []  # type: ignore[var-annotated]

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
                )
                self.requests.append(head + await reader.readexactly(length))
                if not await self.reply(reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def answer(raw: bytes, keep: bool = True) -> Reply:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(raw)
        await writer.drain()
        return keep

    return reply


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Awaitable[object]], object]:
    def runner(coro: Awaitable[object]) -> object:
        if request.param == "uvloop":
            return uvloop.run(coro)  # type: ignore[arg-type]
        return asyncio.run(coro)  # type: ignore[arg-type]

    return runner


def test_content_length_responses_reuse_one_connection(run) -> None:
    async def main() -> None:
        async with Server(answer(ok(b'{"a": 1}', b"Retry-After: 3\r\n"))) as srv:
            pool = ConnectionPool(srv.url + "/prefix/", connect_timeout_s=2, headers={"Authorization": "Bearer k"})
            for _ in range(5):
                resp = await pool.fetch(b"POST", b"/v1/x", b"{}")
                assert (resp.status, resp.body, resp.header("retry-after")) == (200, b'{"a": 1}', "3")
            await pool.close()
        assert srv.connections == 1
        first = srv.requests[0]
        assert first.startswith(b"POST /prefix/v1/x HTTP/1.1\r\n") and first.endswith(b"\r\n\r\n{}")
        assert (
            b"Authorization: Bearer k\r\n" in first
            and b"Content-Length: 2\r\n" in first
            and b"Host: 127.0.0.1:" in first
        )

    run(main())


def test_chunked_interim_and_until_close_bodies(run) -> None:
    async def main() -> None:
        async with Server(answer(b"HTTP/1.1 100 Continue\r\n\r\n" + chunked(b"ab", b"cd"))) as srv:
            pool = ConnectionPool(srv.url, connect_timeout_s=2)
            assert (await pool.fetch(b"GET", b"/")).body == b"abcd"
            await pool.close()
        async with Server(answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end", keep=False)) as srv:
            pool = ConnectionPool(srv.url, connect_timeout_s=2)
            assert (await pool.fetch(b"GET", b"/")).body == b"to the end"
            assert (await pool.fetch(b"GET", b"/")).body == b"to the end"  # not reused: a new connection
            await pool.close()
        assert srv.connections == 2

    run(main())


def test_a_response_that_keeps_coming_is_waited_for_and_one_that_stops_times_out(run) -> None:
    answered: list[int] = []

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(8):  # 0.8 s in all, never 0.3 s without a byte
            await asyncio.sleep(0.1)
            writer.write(b"2\r\n%02d\r\n" % i)
        if not answered:  # the second time it stops before the end
            writer.write(b"0\r\n\r\n")
        answered.append(1)
        await writer.drain()
        if len(answered) > 1:
            await asyncio.sleep(1)
        return True

    async def main() -> None:
        async with Server(trickle) as srv:
            pool = ConnectionPool(srv.url, connect_timeout_s=2)
            resp = await pool.fetch(b"POST", b"/", b"{}", stall_s=0.3)
            assert (resp.status, resp.body) == (200, b"".join(b"%02d" % i for i in range(8)))
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(TimeoutError):
                await pool.fetch(b"POST", b"/", b"{}", stall_s=0.3)
            assert loop.time() - started >= 1.0  # 0.8 s of bytes, then 0.3 s without one
            assert not pool._busy and not pool._idle  # the stalled connection is closed, not kept
            started = loop.time()
            with pytest.raises(TimeoutError, match="deadline"):  # bytes keep coming, but the whole takes too long
                await pool.fetch(b"POST", b"/", b"{}", stall_s=0.3, timeout_s=0.5)
            assert 0.5 <= loop.time() - started and not pool._busy and not pool._idle
            await pool.close()

    run(main())


def test_failures_are_named(run) -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf")
        await writer.drain()
        writer.transport.abort()
        return False

    async def main() -> None:
        async with Server(reset) as srv:
            with pytest.raises(ConnectionLost):
                await ConnectionPool(srv.url, connect_timeout_s=2).fetch(b"GET", b"/")
        async with Server(answer(b"SPDY/9 nonsense\r\n\r\n")) as srv:
            with pytest.raises(BadResponse):
                await ConnectionPool(srv.url, connect_timeout_s=2).fetch(b"GET", b"/")
        with socket.socket() as sock:  # a port nobody listens on
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with pytest.raises(ConnectFailed) as refused:
            await ConnectionPool(f"http://127.0.0.1:{port}", connect_timeout_s=2).fetch(b"GET", b"/")
        assert isinstance(refused.value.os_error, ConnectionRefusedError)

        async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")  # to a TLS hello
            writer.close()

        server = await asyncio.start_server(plain, "127.0.0.1", 0)
        async with server:  # https to a plain-HTTP port: the handshake fails, and says so
            port = server.sockets[0].getsockname()[1]
            with pytest.raises(ConnectFailed) as tls:
                await ConnectionPool(f"https://127.0.0.1:{port}", connect_timeout_s=2).fetch(b"GET", b"/")
            assert isinstance(tls.value.os_error, ssl.SSLError)
        with pytest.raises(ConnectFailed) as unknown:
            await ConnectionPool("http://no-such-host.invalid:30000", connect_timeout_s=5).fetch(b"GET", b"/")
        assert isinstance(unknown.value.os_error, socket.gaierror)

    run(main())


def test_an_idle_connection_the_server_closed_is_not_used_again(run) -> None:
    async def main() -> None:
        async with Server(answer(ok(b"x"), keep=False)) as srv:  # closes after answering, without saying so
            pool = ConnectionPool(srv.url, connect_timeout_s=2)
            assert (await pool.fetch(b"GET", b"/")).body == b"x"
            await asyncio.sleep(0.1)  # its FIN arrives while the connection is idle
            assert (await pool.fetch(b"GET", b"/")).body == b"x"
            await pool.close()
        assert srv.connections == 2

    run(main())


def test_a_connection_idle_longer_than_the_servers_keep_alive_is_not_reused(run) -> None:
    async def main() -> None:
        async with Server(answer(ok(b"x"))) as srv:  # keeps connections open: only max_idle_s decides
            pool = ConnectionPool(srv.url, connect_timeout_s=2, max_idle_s=0.3)  # SGLang's 5 s, scaled
            await pool.fetch(b"GET", b"/")
            await asyncio.sleep(0.05)
            await pool.fetch(b"GET", b"/")
            assert srv.connections == 1  # reused while fresh
            await asyncio.sleep(0.4)
            await pool.fetch(b"GET", b"/")
            assert srv.connections == 2 and len(pool._idle) == 1  # the stale one closed, a new one kept
            await pool.close()

    run(main())


def test_cancelled_requests_leak_no_connection_and_the_bound_holds(run) -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(10)
        return False

    async def main() -> None:
        async with Server(hang) as srv:
            pool = ConnectionPool(srv.url, connect_timeout_s=2, max_connections=2)
            tasks = [asyncio.create_task(pool.fetch(b"GET", b"/")) for _ in range(5)]
            await asyncio.sleep(0.3)
            assert srv.connections == 2 and len(pool._busy) == 2  # three wait for a connection
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert not pool._busy and not pool._idle
            await pool.close()
            with pytest.raises(RuntimeError):
                await pool.fetch(b"GET", b"/")

    run(main())
