"""The wire, as hostile servers and gateways behave: a scripted server on 127.0.0.1 (raw asyncio sockets) answers
each request with bytes, and every request goes through `EndpointClient`, the client layer the dispatcher uses.
Each test asserts what the user gets: no answer stored for another request, no truncated body accepted, no endpoint
marked down by a stale socket, and a clear error for the rest. Each runs on asyncio's loop and on uvloop (`regen
run`'s)."""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
import uvloop
from aiohttp.abc import AbstractResolver, ResolveResult

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.transport import Timeouts, Transport
from pipeline.errors import EndpointDownError, FatalEndpointError, RequestError, RetryableRequestError
from pipeline.records import Prompt

Reply = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # (request, writer) -> keep the connection


def completion(tag: str) -> bytes:
    return orjson.dumps(
        {
            "id": tag,
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"answer for {tag}", "reasoning_content": "think"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5},
        }
    )


def response(body: bytes, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status,
        len(body),
        extra,
        body,
    )


def rid_of(request: bytes) -> str:
    return str(orjson.loads(request.split(b"\r\n\r\n", 1)[1])["rid"])


class Server:
    """Reads each request (head and Content-Length body) and hands it to `reply`; counts connections."""

    def __init__(self, reply: Reply):
        self.reply, self.connections = reply, 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def kill(self) -> None:
        """The process is gone: the port closed and every connection reset."""
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                if not await self.reply(request, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def answer(make: Callable[[bytes], bytes], keep: bool = True) -> Reply:
    async def reply(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(make(request))
        await writer.drain()
        return keep

    return reply


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Awaitable[object]], Any]:
    def runner(coro: Awaitable[object]) -> Any:
        if request.param == "uvloop":
            return uvloop.run(coro)  # type: ignore[arg-type]
        return asyncio.run(coro)  # type: ignore[arg-type]

    return runner


def client(url: str, *, stream: bool = False, api_key: str | None = None, **kw: Any) -> EndpointClient:
    cfg = ClientConfig(connect_timeout_s=2, request_timeout_s=10, stall_timeout_s=2, stream=stream)
    return EndpointClient(url, gen=GenerationConfig(model="m"), client=cfg, api_key=api_key, **kw)


def prompt(i: int = 0) -> Prompt:
    return Prompt(id=f"p{i}", messages=[{"role": "user", "content": f"q{i}"}])


# 1 -----------------------------------------------------------------------------------------------------------------


def test_a_second_response_in_the_same_read_is_never_another_requests_answer(run) -> None:
    """A 503 with an empty body and a 200 in one write (uvicorn answering twice a head split in two): the 503 is
    the first request's answer, and the leftover 200 is never handed to a later request on that connection."""
    first = True

    def make(request: bytes) -> bytes:
        nonlocal first
        if first:
            first = False
            return response(b"", b"503 Service Unavailable") + response(completion("leftover"))
        return response(completion(rid_of(request)))

    async def main() -> list[str]:
        got = []
        async with Server(answer(make)) as srv, client(srv.url) as c:
            with pytest.raises(RetryableRequestError, match="HTTP 503"):
                await c.chat(prompt(), 0, "r-first")
            for i in range(50):
                done = await c.chat(prompt(i), 0, f"r-{i}")
                got.append(done.answer)
        return got

    answers = run(main())
    assert answers == [f"answer for r-{i}" for i in range(50)]


# 2 -----------------------------------------------------------------------------------------------------------------


def test_a_chunked_body_cut_by_a_clean_close_is_not_a_completion(run) -> None:
    body = completion("cut")

    def make(request: bytes) -> bytes:  # header spelled "Chunked"; the last chunk (0) never comes
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: Chunked\r\n\r\n"
        return head + b"%x\r\n%s\r\n" % (len(body), body)

    async def main() -> None:
        async with Server(answer(make, keep=False)) as srv, client(srv.url) as c:
            with pytest.raises(EndpointDownError, match="cut short|connection lost"):
                await c.chat(prompt(), 0, "r")

    run(main())


# 3 -----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_connection_closed_after_each_response_is_never_a_failure(run, how: str) -> None:
    """The server answers one request per connection, then drops the connection without `Connection: close` when
    the next request arrives, unread (a gateway's idle timeout racing the client): 100 back-to-back requests all
    succeed, none is an endpoint failure, and the dropped requests were never read, so none is generated twice."""
    served: dict[int, int] = {}

    async def one_per_connection(request: bytes, writer: asyncio.StreamWriter) -> bool:
        n = served[id(writer)] = served.get(id(writer), 0) + 1
        if n > 1:  # a reused connection: dropped before an answer
            if how == "reset":
                writer.transport.abort()
            return False
        writer.write(response(completion(rid_of(request))))
        await writer.drain()
        return True

    async def main() -> tuple[list[str], int]:
        async with Server(one_per_connection) as srv:
            async with client(srv.url) as c:
                got = [(await c.chat(prompt(i), 0, f"r-{i}")).answer for i in range(100)]
            return got, srv.connections

    got, connections = run(main())
    assert got == [f"answer for r-{i}" for i in range(100)]
    assert connections >= 100


# 4 -----------------------------------------------------------------------------------------------------------------


class Names(AbstractResolver):
    """A name service whose answer the test changes, counting lookups (aiohttp's resolver seam)."""

    def __init__(self, port: int):
        self.port, self.lookups = port, 0

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        self.lookups += 1
        return [_addr(host, self.port)]

    async def close(self) -> None:
        pass


def _addr(host: str, port: int, ip: str = "127.0.0.1") -> ResolveResult:
    return ResolveResult(hostname=host, host=ip, port=port, family=socket.AF_INET, proto=0, flags=0)


def test_a_name_is_looked_up_again_once_its_address_stops_answering(run) -> None:
    """A pod restarted behind the same name: the first connect to the old address fails, and the very next request
    finds the new one (the old answer is dropped, not kept for minutes)."""

    async def main() -> tuple[str, int]:
        reply = answer(lambda r: response(completion(rid_of(r))))
        async with Server(reply) as old, Server(reply) as new:
            names = Names(old.port)
            async with client("http://pod.svc.cluster.local:30000", resolver=names) as c:
                await c.chat(prompt(), 0, "r-old")
                await old.kill()
                names.port = new.port  # the new pod's address
                failed, answers = 0, []
                for i in range(5):  # the old address may cost one request (EndpointDown), never more
                    try:
                        answers.append((await c.chat(prompt(), 0, f"r-{i}")).answer)
                    except EndpointDownError:
                        failed += 1
            assert failed <= 1, failed
            return answers, len(new.requests)

    answers, at_new = run(main())
    assert len(answers) >= 4 and at_new == len(answers)


# 5 -----------------------------------------------------------------------------------------------------------------


def _blackhole() -> list[socket.socket]:
    """A listening port that drops SYNs: its accept queue is full and nothing accepts (a firewalled address)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(sock.getsockname())
        except BlockingIOError:
            pass
        fillers.append(filler)
    return [sock, *fillers]  # the listener first; all kept open until the test ends


class TwoAddresses(Names):
    def __init__(self, dead_port: int, port: int):
        super().__init__(port)
        self.dead_port = dead_port

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        return [_addr(host, self.dead_port), _addr(host, self.port)]


def test_a_name_whose_first_address_drops_syns_is_reached_at_its_second(run) -> None:
    hole = _blackhole()
    dead_port = hole[0].getsockname()[1]

    async def main() -> str:
        async with Server(answer(lambda r: response(completion(rid_of(r))))) as srv:
            names = TwoAddresses(dead_port, srv.port)
            # Addresses tried one after the other would spend connect_timeout_s (30) on the first: past the
            # request's own 3 s. Happy Eyeballs tries the second after 250 ms.
            cfg = ClientConfig(connect_timeout_s=30, request_timeout_s=3, stream=False)
            async with EndpointClient(
                "http://dual.example:30000", gen=GenerationConfig(model="m"), client=cfg, resolver=names
            ) as c:
                return (await c.chat(prompt(), 0, "r")).answer

    try:
        assert run(main()) == "answer for r"
    finally:
        for sock in hole:
            sock.close()


# 6 -----------------------------------------------------------------------------------------------------------------


def _sse_response(events: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(events), events)


ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
TEXT = b'data: {"choices":[{"index":0,"delta":{"content":"half an ans"},"finish_reason":null}]}\n\n'


@pytest.mark.parametrize(
    ("events", "match"),
    [
        (
            ROLE
            + TEXT
            + b'event: error\ndata: {"object":"error","message":"engine died","code":500}\n\n'
            + b"data: [DONE]\n\n",
            "engine died",
        ),
        (
            ROLE
            + TEXT
            + b'data: {"object":"error","message":"overloaded","type":"503","code":503}\n\n'
            + b"data: [DONE]\n\n",
            "overloaded",
        ),
        (ROLE + TEXT + b"data: [DONE]\n\n", "no finish_reason"),
    ],
    ids=["event-error-frame", "error-object", "no-finish-event"],
)
def test_a_stream_that_ends_badly_is_an_error_not_a_completion(run, events: bytes, match: str) -> None:
    async def main() -> None:
        async with Server(answer(lambda r: _sse_response(events))) as srv, client(srv.url, stream=True) as c:
            with pytest.raises(RetryableRequestError, match=match):
                await c.chat(prompt(), 0, "r")

    run(main())


def test_an_error_object_with_status_200_or_no_finish_reason_is_an_error(run) -> None:
    error = orjson.dumps({"object": "error", "message": "boom", "type": "InternalServerError", "code": 500})
    unfinished = completion("x").replace(b'"finish_reason":"stop"', b'"finish_reason":null')

    async def main() -> None:
        async with Server(answer(lambda r: response(error))) as srv, client(srv.url) as c:
            with pytest.raises(RetryableRequestError, match="boom"):
                await c.chat(prompt(), 0, "r")
        async with Server(answer(lambda r: response(unfinished))) as srv, client(srv.url) as c:
            with pytest.raises(RetryableRequestError, match="no finish_reason"):
                await c.chat(prompt(), 0, "r")

    run(main())


# 7 -----------------------------------------------------------------------------------------------------------------


def test_proxy_variables_are_followed_by_the_run_and_preflight_alike(run, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY applies to the run's client and to preflight's control plane; NO_PROXY exempts a host."""
    from pipeline.config import Config
    from pipeline.endpoints.transport import proxy_for
    from pipeline.server.control import control_plane

    target = "http://gpu-node-7.internal:30000"

    def make(request: bytes) -> bytes:
        if b" /server_info " in request or b"server_info HTTP" in request:
            return response(orjson.dumps({"version": "0.5.23"}))
        return response(completion(rid_of(request)))

    async def main(proxy: Server) -> tuple[str, int]:
        async with client(target) as c:
            done = await c.chat(prompt(), 0, "r-proxied")
        async with control_plane(target, Config().client, None) as ctl:
            status, body = await ctl.json("/server_info")
        assert body == {"version": "0.5.23"}
        return done.answer, status

    async def with_proxy() -> tuple[tuple[str, int], list[bytes]]:
        async with Server(answer(make)) as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            assert proxy_for(target) == proxy.url
            assert proxy_for("http://127.0.0.1:30000") is None  # loopback: always direct
            return await main(proxy), proxy.requests

    (got, status), seen = run(with_proxy())
    assert got == "answer for r-proxied" and status == 200
    assert [r.split(b"\r\n")[0] for r in seen] == [
        b"POST http://gpu-node-7.internal:30000/v1/chat/completions HTTP/1.1",
        b"GET http://gpu-node-7.internal:30000/server_info HTTP/1.1",
    ]
    monkeypatch.setenv("NO_PROXY", "gpu-node-7.internal")
    assert proxy_for(target) is None


# 8 and 9: header values and URLs are refused at load (tests/test_config_mistakes.py); a key's surrounding
# whitespace is stripped, so a key file made with `echo key | base64` works -----------------------------------------


def test_an_api_key_with_a_trailing_newline_is_sent_stripped(run, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.config import api_key_for

    monkeypatch.setenv("SGLANG_KEY", "s3cret\n")
    key = api_key_for("SGLANG_KEY", "endpoints[0]")

    async def main() -> bytes:
        async with Server(answer(lambda r: response(completion(rid_of(r))))) as srv:
            async with client(srv.url, api_key=key) as c:
                await c.chat(prompt(), 0, "r")
            return srv.requests[0]

    head = run(main())
    assert b"\r\nAuthorization: Bearer s3cret\r\n" in head


# 10 ----------------------------------------------------------------------------------------------------------------


def test_an_unrequested_gzip_body_is_read(run) -> None:
    def make(request: bytes) -> bytes:
        return response(gzip.compress(completion(rid_of(request))), extra=b"Content-Encoding: gzip\r\n")

    async def main() -> str:
        async with Server(answer(make)) as srv, client(srv.url) as c:
            return (await c.chat(prompt(), 0, "r-gz")).answer

    assert run(main()) == "answer for r-gz"


# 11 ----------------------------------------------------------------------------------------------------------------


def test_a_redirect_is_fatal_and_names_its_location(run) -> None:
    moved = b"HTTP/1.1 301 Moved Permanently\r\nLocation: https://sglang.example/v1/chat/completions\r\n"
    moved += b"Content-Length: 0\r\n\r\n"

    async def main() -> int:
        async with Server(answer(lambda r: moved)) as srv, client(srv.url) as c:
            with pytest.raises(FatalEndpointError, match=r"redirects to https://sglang\.example/v1/chat/completions"):
                await c.chat(prompt(), 0, "r")
            return len(srv.requests)

    assert run(main()) == 1  # not followed, not retried


# 12 ----------------------------------------------------------------------------------------------------------------


def test_a_101_response_is_a_clear_error_without_a_traceback(run, caplog: pytest.LogCaptureFixture) -> None:
    upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello"

    async def main() -> None:
        async with Server(answer(lambda r: upgrade)) as srv, client(srv.url) as c:
            with pytest.raises(RequestError, match="101"):
                await c.chat(prompt(), 0, "r")

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        run(main())
    assert not [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]


# 13 ----------------------------------------------------------------------------------------------------------------


def test_trailer_fields_do_not_overwrite_headers(run) -> None:
    body = b'{"object":"error","message":"The request queue is full.","type":"503","code":503}'
    raw = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 2\r\n"
    raw += b"Transfer-Encoding: chunked\r\nTrailer: Retry-After\r\n\r\n"
    raw += b"%x\r\n%s\r\n0\r\nRetry-After: 9\r\nContent-Type: text/plain\r\n\r\n" % (len(body), body)

    async def main() -> RetryableRequestError:
        async with Server(answer(lambda r: raw)) as srv, client(srv.url) as c:
            with pytest.raises(RetryableRequestError) as info:
                await c.chat(prompt(), 0, "r")
            return info.value

    err = run(main())
    assert err.status == 503 and err.retry_after == 2.0
    assert "The request queue is full." in str(err)


# timeouts, named ---------------------------------------------------------------------------------------------------


def test_a_stalled_stream_and_a_request_past_its_time_say_which_timeout_ran_out(run) -> None:
    async def stall(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(ROLE), ROLE))
        await writer.drain()
        await asyncio.sleep(30)
        return False

    async def main() -> None:
        async with Server(stall) as srv:
            cfg = ClientConfig(connect_timeout_s=2, request_timeout_s=10, stall_timeout_s=0.3, stream=True)
            async with EndpointClient(srv.url, gen=GenerationConfig(model="m"), client=cfg) as c:
                with pytest.raises(RetryableRequestError, match=r"stream stalled \(no bytes for 0.3s\)"):
                    await c.chat(prompt(), 0, "r")
            # the whole request: a control-plane call's own bound (a generation's is the dispatcher's hang watch,
            # tests/test_dispatcher.py), here on a body that stops coming
            async with Transport(srv.url, headers={}, connect_timeout_s=2) as t:
                with pytest.raises(RetryableRequestError, match=r"request timed out after 0.4s \(whole-request"):
                    await t.request("POST", "/v1/chat/completions", body=b"{}", timeouts=Timeouts(connect=2, total=0.4))

    run(main())
