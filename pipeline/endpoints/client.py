"""One SGLang endpoint: the request payload, the response parsing (reasoning split) and what makes a completion.

Requests go over `transport.Transport` (aiohttp's client, configured for the job); its failures and HTTP statuses
become our error classes in `failures`, the one map. What is checked here, whatever the client library: a 200 that
is an error object (`{"object": "error"}`, an SSE error event) is that error, and a completion needs a finish reason.

Every generation asks for the server's speculative acceptance of the request where its SGLang release reports it
(`sglang.releases.spec_details_field`: what preflight learned of the server, `EndpointClient.adopt`); a server that
reports none leaves `spec_accept_length`/`spec_verify_ct` null, and the client says so once in the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson

from ..config import ClientConfig, GenerationConfig
from ..errors import EndpointDownError, RequestError, RetryableRequestError
from ..records import Completion, Prompt, RequestOverrides
from ..sglang.releases import RETURN_META_INFO, RETURN_SPEC_TOKENS_DETAILS, spec_details_field
from . import failures
from .loop_guard import LoopStopped, StreamGuard
from .reasoning import split_reasoning
from .sse import ErrorEvent, InvalidStream, parse_stream
from .transport import Reply, Resolver, Timeouts, Transport
from .wire import Pieces, Wire

CONTROL_CONNECTIONS = 8  # health, loads, server info and aborts of one endpoint at once
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
CHAT_PATH = "/v1/chat/completions"

log = logging.getLogger("regen.endpoints")


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


def _sampling(overrides: RequestOverrides) -> dict[str, float]:
    """A batch row's sampling fields as the request body takes them: `max_completion_tokens` (OpenAI's newer
    name, preferred when both are set) as `max_tokens`; the seed apart (each attempt's seed derives from it)."""
    fields: dict[str, float | None] = {
        "temperature": overrides.temperature,
        "top_p": overrides.top_p,
        "top_k": overrides.top_k,
        "min_p": overrides.min_p,
        "max_tokens": overrides.max_tokens,
    }
    if overrides.max_completion_tokens is not None:
        fields["max_tokens"] = overrides.max_completion_tokens
    return {k: v for k, v in fields.items() if v is not None}


class EndpointClient:
    """Two long-lived transports to one endpoint: one for generations, one for the control plane.

    The endpoint pool is the one place that bounds requests in flight (its capacity follows the server when
    `concurrency` is 0), so the generation connections have no limit of their own: a request never waits for a
    free connection, and the connect timeout covers only opening a socket, never a wait behind other generations.
    Health probes, `/v1/loads`, `/abort_request` and other small calls use their own small pool, so they are
    answered while every generation connection is busy for minutes. `resolver` is aiohttp's seam for name lookups.
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
        resolver: Resolver | None = None,
    ):
        self.url = url.rstrip("/")
        self.honor_overrides = honor_overrides
        self.server_version: str | None = None  # SGLang's, once preflight read it: the parser-off split follows it
        self.spec_field: str | None = None  # the request field that asks for the acceptance (adopt), or None
        self.speculative: bool | None = None  # whether /server_info names a speculative algorithm (None: unknown)
        self.router = False  # sglang-router: asked for nothing (its version is not its workers')
        self._spec_silence_told = False  # the log has said once why this server's rows have no acceptance
        self.gen = gen
        self.cfg = client
        self.concurrency = concurrency  # the configured value, for reports; the pool enforces capacity
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._resolver = resolver
        self._base = build_payload_base(gen)
        self._session: Transport | None = None
        self._control: Transport | None = None
        self._aborts: set[asyncio.Task[None]] = set()  # see abort_moved
        # A generation has no whole-request timer here: how long one may take is the dispatcher's to say, at most
        # request_timeout_s (Dispatcher.watch_hangs, engine/deadline.py), and it aborts the request on the server
        # too. aiohttp's per-request timer cost ~6 us a request, ~3% of a run's client CPU (BENCHMARKS.md).
        self._plain = Timeouts(connect=client.connect_timeout_s)  # one value each: aiohttp's is built once
        self._streamed = Timeouts(connect=client.connect_timeout_s, stall=client.stall_timeout_s)

    def adopt(self, version: str | None, *, speculative: bool | None = None, router: bool = False) -> None:
        """What preflight learned of the server: its SGLang version (None: unknown), whether it runs speculative
        decoding, and whether it is sglang-router (whose own version says nothing of its workers': nothing is
        asked of it). Sets the field each generation asks for the request's speculative acceptance with."""
        self.server_version = version
        self.speculative, self.router = speculative, router
        self.spec_field = None if router else spec_details_field(version, stream=self.cfg.stream)

    async def __aenter__(self) -> EndpointClient:
        # No bound on generation connections: the endpoint pool's capacity bounds them (see the class docstring).
        opts: dict[str, Any] = {
            "headers": self._headers,
            "connect_timeout_s": self.cfg.connect_timeout_s,
            "resolver": self._resolver,
        }
        self._session = await Transport(self.url, **opts).__aenter__()
        self._control = await Transport(self.url, limit=CONTROL_CONNECTIONS, **opts).__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._aborts):  # the run is over: nothing of it is worth waiting on a frozen server for
            task.cancel()
        await asyncio.gather(*self._aborts, return_exceptions=True)
        for transport in (self._session, self._control):
            if transport is not None:
                await transport.close()
        self._session = self._control = None

    @property
    def session(self) -> Transport:
        """The generation connections."""
        if self._session is None:
            raise RuntimeError("EndpointClient used outside `async with` (or after close)")
        return self._session

    @property
    def control(self) -> Transport:
        """The control-plane connections (health, loads, server info, aborts): never behind a generation."""
        if self._control is None:
            raise RuntimeError("EndpointClient used outside `async with` (or after close)")
        return self._control

    def payload(self, prompt: Prompt, attempt: int, rid: str) -> dict[str, Any]:
        body = dict(self._base)
        body["messages"] = prompt.messages
        if prompt.tools:  # the row's tools, with every turn of it (a tool conversation's context)
            body["tools"] = prompt.tools
        seed_base = self.gen.seed
        overrides = prompt.overrides if self.honor_overrides else None
        if overrides is not None:
            body.update(_sampling(overrides))
            seed_base = seed_base if overrides.seed is None else overrides.seed
        if prompt.temperature is not None:  # generation.temperatures: always this sample's own
            body["temperature"] = prompt.temperature
        body["seed"] = request_seed(seed_base, prompt.id, attempt)  # a retry gets a new seed, overridden or not
        body["rid"] = rid
        if self.spec_field is not None:
            body[self.spec_field] = True
        if self.cfg.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def chat(self, prompt: Prompt, attempt: int, rid: str) -> Completion:
        """Send one chat completion and return it parsed. Raises a RequestError subclass on failure.

        Bounded by the connect timeout and, streamed, the stall timeout; the caller bounds the whole request (the
        dispatcher's hang watch: a learned deadline, request_timeout_s at most)."""
        body = self.payload(prompt, attempt, rid)
        data = orjson.dumps(body)
        started = time.monotonic()
        wire = await (self._stream(data, rid, prompt) if self.cfg.stream else self._once(data))
        if not wire.finish_reason:
            raise RetryableRequestError(f"{self.url}: the completion has no finish_reason (cut short?)")
        return self._completion(wire, body["seed"], time.monotonic() - started)

    async def _once(self, data: bytes) -> Wire:
        reply = await self.session.request("POST", CHAT_PATH, body=data, timeouts=self._plain)
        _check_status(reply, self.url)
        try:
            obj = orjson.loads(reply.body)
        except orjson.JSONDecodeError as exc:
            raise RetryableRequestError(f"{self.url}: invalid JSON in a 200 response: {exc}") from None
        failures.raise_for_error_object(obj, self.url)
        pieces = Pieces()
        try:
            pieces.take_body(obj)
            return pieces.result()
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise RetryableRequestError(f"{self.url}: not a chat completion in a 200 response: {exc!r}") from None

    async def _stream(self, data: bytes, rid: str, prompt: Prompt) -> Wire:
        """A streamed completion; with `client.loop_guard`, stopped once it loops (endpoints/loop_guard.py): the
        connection closed, the request aborted on the server by its rid, what had streamed returned."""
        guard = StreamGuard(exempt=prompt.text) if self.cfg.loop_guard else None
        try:
            reply = await self.session.request(
                "POST", CHAT_PATH, body=data, timeouts=self._streamed, on_chunk=guard.take if guard else None
            )
        except LoopStopped as stopped:
            assert guard is not None
            await self.abort(rid)
            return guard.partial(stopped)
        except RetryableRequestError as exc:
            if failures.timed_out(exc):
                await self.abort(rid)  # stalled or past its time: the server may still be decoding it
            raise
        _check_status(reply, self.url)
        return _parse_sse(reply.body, self.url)

    async def abort(self, rid: str) -> None:
        """Tell the server to stop generating `rid` (best effort: a stalled server may not answer)."""
        timeouts = Timeouts(connect=min(2.0, self.cfg.connect_timeout_s), total=2.0)
        try:
            await self.control.request("POST", "/abort_request", body=orjson.dumps({"rid": rid}), timeouts=timeouts)
        except RequestError:
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
            timeouts = Timeouts(connect=min(self.cfg.connect_timeout_s, left), total=left)
            try:  # on the generation connections: uncapped, so a freeze's worth of aborts never holds up a probe
                await self.session.request("POST", "/abort_request", body=body, timeouts=timeouts)
                return
            except EndpointDownError as exc:
                if failures.holder_gone(exc):
                    return  # refused (nothing listens: no process holds the request) or reset by a dying server
            except RetryableRequestError:
                pass  # no connection within connect_timeout_s (a partition): again, after a backoff
            except RuntimeError:
                return  # the client is closing
            await asyncio.sleep(min(delay, max(0.0, until - loop.time())))
            delay = min(2 * delay, self.cfg.backoff_max_s)

    def _completion(self, wire: Wire, seed: int, latency: float) -> Completion:
        reasoning, answer = split_reasoning(wire.content, wire.reasoning, self.gen.thinking, self.server_version)
        if wire.spec_accept_length is None and not self._spec_silence_told and wire.finish_reason != "abort":
            self._spec_silence_told = True
            log.info(
                "no speculative acceptance reported by %s (%s): spec_accept_length and spec_verify_ct stay null for "
                "its rows", self.url, self._spec_silence(),
                extra={"event": "no_spec_acceptance", "url": self.url, "asked": self.spec_field},
            )  # fmt: skip
        return Completion(
            reasoning=reasoning,
            answer=answer,
            finish_reason=wire.finish_reason,
            prompt_tokens=wire.prompt_tokens,
            completion_tokens=wire.completion_tokens,
            reasoning_tokens=wire.reasoning_tokens,
            model=wire.model or self.gen.model,
            endpoint=self.url,
            latency_s=latency,
            seed=seed,
            spec_accept_length=wire.spec_accept_length,
            spec_verify_ct=wire.spec_verify_ct,
            loop_stopped=wire.loop is not None,
            tool_calls=wire.tool_calls,
            loop_detail=wire.loop_detail,
        )

    def _spec_silence(self) -> str:
        """Why a completion came without the server's speculative acceptance, as far as this client knows."""
        if self.speculative is False:
            return "the server runs no speculative decoding: /server_info speculative_algorithm is null"
        if self.spec_field is not None:
            return f"asked with {self.spec_field}, none came"
        if self.router:
            return "sglang-router: not asked for, whatever its workers' releases"
        if self.server_version is None:
            return "the server's SGLang version is unknown (not SGLang, or preflight skipped): not asked for"
        if self.cfg.stream:
            return (
                f"SGLang {self.server_version} reports it on a streamed request from {RETURN_SPEC_TOKENS_DETAILS} only"
            )
        return f"SGLang {self.server_version} reports it on a chat request from {RETURN_META_INFO} only"

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
        timeouts = Timeouts(connect=min(self.cfg.connect_timeout_s, timeout_s), total=timeout_s)
        reply = await self.control.request("GET", path, timeouts=timeouts)
        _check_status(reply, self.url)
        return reply.body


def _check_status(reply: Reply, url: str) -> None:
    failures.raise_for_status(
        reply.status, reply.body, url, retry_after=reply.header("Retry-After"), location=reply.header("Location")
    )


def _parse_sse(body: bytes, url: str) -> Wire:
    """The completion a chat stream's body adds up to (`sse.parse_stream`), its failures as our errors."""
    try:
        return parse_stream(body)
    except ErrorEvent as event:
        failures.raise_for_status(
            max(event.status, 400), orjson.dumps({"message": event.message}), url, retry_after=None, location=None
        )
        raise  # (unreachable: raise_for_status raises for any status >= 400)
    except InvalidStream as exc:
        raise RetryableRequestError(f"{url}: {exc}") from None


@asynccontextmanager
async def open_client(url: str, **kwargs: Any) -> AsyncIterator[EndpointClient]:
    async with EndpointClient(url, **kwargs) as client:
        yield client
