import orjson
import pytest

from pipeline.config import GenerationConfig
from pipeline.endpoints.client import _parse_sse, build_payload_base, request_seed
from pipeline.endpoints.reasoning import split_reasoning
from pipeline.endpoints.wire import Wire
from pipeline.errors import RetryableRequestError


@pytest.mark.parametrize(
    ("content", "reasoning", "finish", "expected"),
    [
        ("\n\nThe answer is 4.", "Two plus two.", "stop", ("Two plus two.", "The answer is 4.")),
        ("Two plus two.\n</think>\n\nThe answer is 4.", None, "stop", ("Two plus two.", "The answer is 4.")),
        ("<think>Two plus two.</think>4", None, "stop", ("Two plus two.", "4")),
        ("still thinking about it", None, "length", ("still thinking about it", "")),
        ("just an answer", None, "stop", ("just an answer", "")),  # qwen3 force mode: no </think>, all reasoning
        ("a</think>b</think>c", None, "stop", ("a", "b</think>c")),
    ],
    ids=[
        "parser-on",
        "parser-off-no-open-tag",
        "parser-off-open-tag",
        "truncated-parser-off",
        "no-tags",
        "first-close",
    ],
)
def test_split_reasoning(content: str, reasoning: str | None, finish: str, expected: tuple[str | None, str]) -> None:
    assert split_reasoning(content, reasoning, thinking=True) == expected  # the finish reason no longer matters


def test_thinking_off_keeps_content() -> None:
    assert split_reasoning("x</think>y", None, thinking=False) == (None, "x</think>y")


def test_request_seed_is_stable_and_varies_by_attempt() -> None:
    assert request_seed(0, "p1", 0) == request_seed(0, "p1", 0)
    assert len({request_seed(0, "p1", a) for a in range(4)}) == 4
    assert request_seed(0, "p1", 0) != request_seed(1, "p1", 0)
    assert 0 <= request_seed(5, "x" * 1000, 3) < 2**31


def test_payload_always_sends_max_tokens_and_thinking() -> None:
    base = build_payload_base(GenerationConfig(model="Qwen3.6-27B", max_tokens=123, thinking=False))
    assert base["max_tokens"] == 123
    assert base["chat_template_kwargs"] == {"enable_thinking": False}
    assert base["separate_reasoning"] is True


def _sse(events: list[object], done: bool = True, eol: bytes = b"\n") -> bytes:
    body = b"".join(b"data: " + orjson.dumps(e) + eol + eol for e in events)
    return body + (b"data: [DONE]" + eol + eol if done else b"")


def _read(raw: bytes) -> Wire:
    return _parse_sse(raw, "http://sim")


_EVENTS: list[object] = [
    {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
    *({"choices": [{"delta": {"reasoning_content": f"r{i} "}}]} for i in range(20)),
    *({"choices": [{"delta": {"reasoning_content": None, "content": f"c{i} "}}]} for i in range(5)),
    {"choices": [{"delta": {}, "finish_reason": "stop"}], "model": "m"},
    {"choices": [], "usage": {"completion_tokens": 25}},
]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_sse_reads_the_same_whatever_the_line_ends(eol: bytes) -> None:
    out = _read(_sse(_EVENTS, eol=eol) + b"data: {ignored after done}\n\n")
    assert out == Wire(
        content="".join(f"c{i} " for i in range(5)),
        reasoning="".join(f"r{i} " for i in range(20)),
        finish_reason="stop",
        completion_tokens=25,
        model="m",
    )


@pytest.mark.parametrize(
    "raw",
    [
        _sse(_EVENTS[:3]) .replace(b'"r0 "', b'"r0 '),  # a torn object
        _sse(_EVENTS[:2]).replace(b"data: {", b"data: 1,{", 1),  # two values in one payload
        _sse([*_EVENTS[:2], [1, 2]]),  # not an object
    ],
    ids=["torn", "two-values", "not-an-object"],
)  # fmt: skip
def test_sse_refuses_an_invalid_chunk(raw: bytes) -> None:
    with pytest.raises(RetryableRequestError, match="invalid JSON in an SSE chunk"):
        _read(raw)


def test_sse_error_event_and_missing_done() -> None:
    with pytest.raises(RetryableRequestError, match="HTTP 503: busy"):
        _read(_sse([_EVENTS[1], {"error": {"code": 503, "message": "busy"}}]))
    with pytest.raises(RetryableRequestError, match="without \\[DONE\\]"):
        _read(_sse(_EVENTS, done=False))


def test_abort_moved_waits_for_a_frozen_server_and_gives_up_on_a_closed_port() -> None:
    """The abort of a moved request waits in a server's socket until it is read (a frozen server that comes back),
    and ends at once where nothing listens (the process is gone, and its requests with it)."""
    import asyncio
    import socket

    from pipeline.config import ClientConfig
    from pipeline.endpoints.client import EndpointClient

    async def main() -> None:
        received: list[bytes] = []
        frozen = asyncio.Event()

        async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await frozen.wait()  # stopped: the request waits in the socket
            received.append(await reader.readuntil(b"}"))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()

        srv = await asyncio.start_server(server, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        cfg = ClientConfig(connect_timeout_s=0.5, request_timeout_s=5.0)
        async with EndpointClient(f"http://127.0.0.1:{port}", gen=GenerationConfig(model="m"), client=cfg) as client:
            client.abort_moved("regen-p1-0-7")
            await asyncio.sleep(0.5)  # longer than the connect timeout: still waiting, not given up
            assert received == [] and len(client._aborts) == 1
            frozen.set()  # SIGCONT
            await asyncio.wait_for(asyncio.gather(*client._aborts), 2)
            assert (
                received and received[0].startswith(b"POST /abort_request ") and b'"rid":"regen-p1-0-7"' in received[0]
            )
        srv.close()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]  # bound, not listening: refused
            async with EndpointClient(f"http://127.0.0.1:{closed}", gen=GenerationConfig(model="m"), client=cfg) as c:
                c.abort_moved("regen-p2-0-8")
                await asyncio.wait_for(asyncio.gather(*c._aborts), 1)  # ends at once, no retry for 5 s

    asyncio.run(main())
