"""One SGLang endpoint: the request payload, the response parsing (reasoning split) and the error mapping.

Requests go over `http1.ConnectionPool` (keep-alive HTTP/1.1 on asyncio protocols, parsed by httptools): measured
here, aiohttp's client costs ~2.7x as much per request and httpx's pool ~55x (BENCHMARKS.md), and a client that
costs CPU per completion slows every GPU behind it. Transport failures and HTTP statuses become our error classes
in exactly one place, `_raise_for`/`_map_transport`.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson

from ..config import ClientConfig, GenerationConfig
from ..errors import (
    EndpointDownError,
    FatalEndpointError,
    PermanentRequestError,
    RequestError,
    RetryableRequestError,
)
from ..records import Completion, Prompt
from .http1 import BadResponse, ConnectFailed, ConnectionLost, ConnectionPool, TransportError
from .reasoning import split_reasoning
from .sse import ErrorEvent, InvalidStream, parse_stream

CONTROL_CONNECTIONS = 8  # health, loads, server info and aborts of one endpoint at once
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
CHAT_PATH = b"/v1/chat/completions"


def request_seed(base_seed: int, prompt_id: str, attempt: int) -> int:
    """A per-request seed from (config seed, prompt id, attempt): reproducible, different on each retry."""
    digest = hashlib.blake2b(f"{base_seed}:{prompt_id}:{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def build_payload_base(gen: GenerationConfig) -> dict[str, Any]:
    return {
        "model": gen.model,
        "max_tokens": gen.max_tokens,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "top_k": gen.top_k,
        "min_p": gen.min_p,
        "separate_reasoning": gen.separate_reasoning,
        "chat_template_kwargs": {"enable_thinking": gen.thinking},
    }


class EndpointClient:
    """Two long-lived connection pools to one endpoint: one for generations, one for the control plane.

    The endpoint pool is the one place that bounds requests in flight (its capacity follows the server when
    `concurrency` is 0), so the generation connections have no limit of their own: a request never waits for a
    free connection, and the connect timeout covers only opening a socket, never a wait behind other generations.
    Health probes, `/v1/loads`, `/abort_request` and other small calls use their own small connector, so they are
    answered while every generation connection is busy for minutes.
    """

    def __init__(
        self,
        url: str,
        *,
        gen: GenerationConfig,
        client: ClientConfig,
        concurrency: int = 0,
        api_key: str | None = None,
        honor_overrides: bool = False,
    ):
        self.url = url.rstrip("/")
        self.honor_overrides = honor_overrides
        self.server_version: str | None = None  # SGLang's, once preflight read it: the parser-off split follows it
        self.gen = gen
        self.cfg = client
        self.concurrency = concurrency  # the configured value, for reports; the pool enforces capacity
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._base = build_payload_base(gen)
        self._session: ConnectionPool | None = None
        self._control: ConnectionPool | None = None
        self._aborts: set[asyncio.Task[None]] = set()  # see abort_moved

    async def __aenter__(self) -> EndpointClient:
        # No bound on generation connections: the endpoint pool's capacity bounds them (see the class docstring).
        connect = self.cfg.connect_timeout_s
        self._session = ConnectionPool(self.url, connect_timeout_s=connect, headers=self._headers)
        self._control = ConnectionPool(
            self.url, connect_timeout_s=connect, headers=self._headers, max_connections=CONTROL_CONNECTIONS
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._aborts):  # the run is over: nothing of it is worth waiting on a frozen server for
            task.cancel()
        await asyncio.gather(*self._aborts, return_exceptions=True)
        for pool in (self._session, self._control):
            if pool is not None:
                await pool.close()
        self._session = self._control = None

    @property
    def session(self) -> ConnectionPool:
        """The generation connections."""
        if self._session is None:
            raise RuntimeError("EndpointClient used outside `async with` (or after close)")
        return self._session

    @property
    def control(self) -> ConnectionPool:
        """The control-plane connections (health, loads, server info, aborts): never behind a generation."""
        if self._control is None:
            raise RuntimeError("EndpointClient used outside `async with` (or after close)")
        return self._control

    def payload(self, prompt: Prompt, attempt: int, rid: str) -> dict[str, Any]:
        body = dict(self._base)
        body["messages"] = prompt.messages
        seed_base = self.gen.seed
        overrides = prompt.extra.get("_request_overrides") if self.honor_overrides else None
        if overrides:
            body.update({k: v for k, v in overrides.items() if k not in ("seed", "max_completion_tokens")})
            if "max_completion_tokens" in overrides:
                body["max_tokens"] = overrides["max_completion_tokens"]
            seed_base = overrides.get("seed", seed_base)
        if "_sample_temperature" in prompt.extra:  # generation.temperatures: always this sample's own
            body["temperature"] = prompt.extra["_sample_temperature"]
        body["seed"] = request_seed(seed_base, prompt.id, attempt)  # a retry gets a new seed, overridden or not
        body["rid"] = rid
        if self.cfg.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def chat(self, prompt: Prompt, attempt: int, rid: str) -> Completion:
        """Send one chat completion and return it parsed. Raises a RequestError subclass on failure."""
        body = self.payload(prompt, attempt, rid)
        data = orjson.dumps(body)
        started = time.monotonic()
        try:
            if self.cfg.stream:
                parsed = await self._stream(data, rid)
            else:
                parsed = await self._once(data)
        except RequestError:
            raise
        except (TransportError, TimeoutError, OSError) as exc:
            raise _map_transport(exc, self.url) from exc
        return self._completion(parsed, body["seed"], time.monotonic() - started)

    async def _once(self, data: bytes) -> dict[str, Any]:
        resp = await self.session.fetch(b"POST", CHAT_PATH, data, timeout_s=self.cfg.request_timeout_s)
        raw = resp.body
        if resp.status != 200:
            _raise_for(resp.status, raw, resp.header("Retry-After"), self.url)
        try:
            obj = orjson.loads(raw)
            choice = obj["choices"][0]
            message = choice["message"]
            return {
                "content": message.get("content") or "",
                "reasoning": message.get("reasoning_content"),
                "finish_reason": choice.get("finish_reason") or "",
                "usage": obj.get("usage") or {},
                "model": obj.get("model") or "",
            }
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise RetryableRequestError(f"{self.url}: invalid JSON in a 200 response: {exc}") from None

    async def _stream(self, data: bytes, rid: str) -> dict[str, Any]:
        stall = self.cfg.stall_timeout_s
        try:
            resp = await self.session.fetch(
                b"POST", CHAT_PATH, data, stall_s=stall, timeout_s=self.cfg.request_timeout_s
            )
        except TimeoutError:
            await self.abort(rid)
            raise RetryableRequestError(
                f"{self.url}: stream stalled (no bytes for {self.cfg.stall_timeout_s}s)"
            ) from None
        if resp.status != 200:
            _raise_for(resp.status, resp.body, resp.header("Retry-After"), self.url)
        return _parse_sse(resp.body, self.url)

    async def abort(self, rid: str) -> None:
        """Tell the server to stop generating `rid` (best effort: a stalled server may not answer)."""
        try:
            async with asyncio.timeout(2):
                await self.control.fetch(b"POST", b"/abort_request", orjson.dumps({"rid": rid}))
        except (TransportError, TimeoutError, OSError):
            pass

    def abort_moved(self, rid: str) -> None:
        """Abort `rid` on this server once it answers, in the background: the request was given up here (the server
        stopped answering, or the request passed its deadline) and is retried elsewhere.

        A server that comes back (a frozen process, a stalled GPU, a healed partition) would otherwise decode it to
        its end for nobody, a duplicate of the retry: SGLang does not notice that a non-streaming request's client
        has gone while the request decodes (`_wait_one_response` in python/sglang/srt/managers/tokenizer_manager.py
        looks only after 4 s without output, and a decoding request has output every few tokens). The abort waits
        in the server's socket through a freeze and is sent again after a connect timeout, for as long as the
        request itself could have run (`request_timeout_s`); a refused or reset connection ends it (the process
        is gone, and its requests with it). Unknown rids are ignored by SGLang."""
        task = asyncio.get_running_loop().create_task(self._abort_when_answered(rid))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    async def _abort_when_answered(self, rid: str) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + self.cfg.request_timeout_s
        body = orjson.dumps({"rid": rid})
        delay = max(0.05, self.cfg.backoff_base_s)
        while (left := until - loop.time()) > 0:
            try:  # on the generation connections: uncapped, so a freeze's worth of aborts never holds up a probe
                await self.session.fetch(b"POST", b"/abort_request", body, timeout_s=left)
                return
            except ConnectFailed as exc:
                if isinstance(exc.os_error, ConnectionRefusedError):
                    return  # the host is up and nothing listens: no process there holds the request
            except (ConnectionLost, BadResponse, RuntimeError):
                return  # reset by a dying server; or the client is closing
            except TimeoutError:
                pass  # no connection within connect_timeout_s (a partition): again, after a backoff
            await asyncio.sleep(min(delay, max(0.0, until - loop.time())))
            delay = min(2 * delay, self.cfg.backoff_max_s)

    def _completion(self, parsed: dict[str, Any], seed: int, latency: float) -> Completion:
        usage = parsed["usage"]
        reasoning, answer = split_reasoning(
            parsed["content"], parsed["reasoning"], self.gen.thinking, self.server_version
        )
        rt = usage.get("reasoning_tokens")
        if rt is None:
            rt = ((usage.get("completion_tokens_details") or {}).get("reasoning_tokens")) or None
        return Completion(
            reasoning=reasoning,
            answer=answer,
            finish_reason=parsed["finish_reason"],
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            reasoning_tokens=rt,
            model=parsed["model"] or self.gen.model,
            endpoint=self.url,
            latency_s=latency,
            seed=seed,
            spec_accept_length=parsed.get("spec_accept_length"),
        )

    async def check_health(self, timeout_s: float = 10.0) -> None:
        """GET /health and require a 200; the body is not read as JSON (sglang-router answers plain "OK")."""
        await self._get("/health", timeout_s)

    async def get_json(self, path: str, timeout_s: float = 10.0) -> Any:
        """A small control-plane GET (server_info, loads), parsed."""
        raw = await self._get(path, timeout_s)
        try:
            return orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError as exc:
            raise RetryableRequestError(f"{self.url}{path}: invalid JSON: {exc}") from None

    async def _get(self, path: str, timeout_s: float) -> bytes:
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self.control.fetch(b"GET", path.encode())
        except (TransportError, TimeoutError, OSError) as exc:
            raise _map_transport(exc, self.url) from exc
        if resp.status != 200:
            _raise_for(resp.status, resp.body, resp.header("Retry-After"), self.url)
        return resp.body


def _parse_sse(body: bytes, url: str) -> dict[str, Any]:
    """The completion a chat stream's body adds up to (`sse.parse_stream`), its failures as our errors."""
    try:
        return parse_stream(body)
    except ErrorEvent as event:
        _raise_for(event.status, orjson.dumps({"message": event.message}), None, url)
        raise  # (unreachable: _raise_for always raises)
    except InvalidStream as exc:
        raise RetryableRequestError(f"{url}: {exc}") from None


def _error_message(raw: bytes) -> str:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:300].decode("utf-8", "replace")
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(obj)[:300]


def _raise_for(status: int, raw: bytes, retry_after: str | None, url: str) -> None:
    """The one place an HTTP status becomes an error class."""
    message = f"{url}: HTTP {status}: {_error_message(raw)}"
    after: float | None = None
    if retry_after:
        try:
            after = float(retry_after)
        except ValueError:
            after = None
    if status in (401, 403):
        raise FatalEndpointError(f"{message} (check the endpoint's api_key_env)")
    if status == 404:
        raise FatalEndpointError(f"{message} (wrong URL or model name?)")
    if status in (408, 429) or status >= 500:
        raise RetryableRequestError(message, status=status, retry_after=after)
    if 400 <= status < 500:
        raise PermanentRequestError(message, status=status)
    raise RetryableRequestError(message, status=status)


def _map_transport(exc: BaseException, url: str) -> RequestError:
    """The one place a transport failure becomes an error class."""
    if isinstance(exc, ConnectFailed):
        if isinstance(exc.os_error, socket.gaierror):
            return EndpointDownError(f"{url}: cannot resolve host ({exc.os_error})")
        return EndpointDownError(f"{url}: cannot connect ({exc.os_error})")
    if isinstance(exc, ConnectionLost | ConnectionResetError):
        return EndpointDownError(f"{url}: connection lost mid-response ({exc})")
    if isinstance(exc, TimeoutError):
        return RetryableRequestError(f"{url}: request timed out")
    if isinstance(exc, BadResponse):
        return RetryableRequestError(f"{url}: not an HTTP response ({exc})")
    return RetryableRequestError(f"{url}: {type(exc).__name__}: {exc}")


@asynccontextmanager
async def open_client(url: str, **kwargs: Any) -> AsyncIterator[EndpointClient]:
    async with EndpointClient(url, **kwargs) as client:
        yield client
