"""The generation routes: `/v1/chat/completions`, `/v1/completions`, `/generate`.

One path for all three: parse and validate (the 400s), count, draw a fault, plan the output, decode (instantly or
through the batching engine), then write the route's body or SSE events. Instant mode never awaits anything but
the request body, so the simulator is never the bottleneck of the pipeline's own benchmarks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from . import protocol as p
from . import text
from .engine import Job, QueueFull
from .state import Inflight, Sim

SIM = web.AppKey("sim", Sim)


class _Hang(Exception):
    pass


def _json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


async def _read_body(request: web.Request) -> dict[str, Any]:
    media = request.headers.get("Content-Type", "")
    if media != "application/json" and media.split(";", 1)[0].strip().lower() != "application/json":
        raise p.bad_request("Unsupported Media Type: Only 'application/json' is allowed")
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise p.bad_request(f"body: JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise p.bad_request("body: Input should be a valid dictionary")
    return body


async def chat(request: web.Request) -> web.StreamResponse:
    return await _handle(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, "completions")


async def generate(request: web.Request) -> web.StreamResponse:
    return await _handle(request, "generate")


def _parse(sim: Sim, route: str, body: dict[str, Any]) -> p.GenRequest:
    if route == "chat":
        return p.parse_chat(body, sim.served, sim.context, sim.resolved.get("reasoning_parser"), sim.v)
    if route == "completions":
        return p.parse_completion(body, sim.context)
    return p.parse_generate(body, sim.context)


def _error(sim: Sim, route: str, exc: p.ApiError, stream: bool) -> web.Response:
    sim.stats.errors[str(exc.status)] += 1
    if route == "generate":
        return _json_response(orjson.dumps({"error": {"message": exc.message}}), exc.status)
    if stream and sim.v < (0, 5, 10) and exc.status == 400:
        # 0.5.9 validates inside the stream: HTTP 200, an error event, then [DONE].
        return _sse_response(p.sse({"error": exc.body()}) + p.DONE)
    if stream and exc.status == 503:
        # An abort with a status code after the 200: an error event (0.5.9: a normal abort finish), then [DONE].
        return _sse_response(p.sse(exc.stream_body() if sim.v >= (0, 5, 10) else _abort_chunk(route)) + p.DONE)
    return _json_response(orjson.dumps(exc.body()), exc.status)


def _sse_response(events: bytes) -> web.Response:
    return web.Response(body=events, content_type="text/event-stream")


def _abort_chunk(route: str) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "abort", "matched_stop": None}
    if route == "chat":
        choice["delta"] = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
    else:
        choice["text"] = ""
    return {
        "id": p.random_id(),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "choices": [choice],
    }


async def _handle(request: web.Request, route: str) -> web.StreamResponse:
    sim = request.app[SIM]
    body: dict[str, Any] = {}
    response: web.StreamResponse
    try:
        body = await _read_body(request)
        req = _parse(sim, route, body)
    except p.ApiError as exc:
        response = _error(sim, route, exc, bool(body.get("stream")))
        return await _finish_response(sim, request, response)
    key = text.prompt_key(req.messages)
    attempt = sim.stats.received(key, req.rid)
    rid = p.new_id(req)
    sim.stats.in_flight += 1
    registered = False
    try:
        if rid in sim.inflight:
            raise p.ApiError(400, f"Duplicate request ID detected: {rid}")
        inflight = sim.inflight[rid] = Inflight()
        registered = True
        response = await _generate(sim, request, req, rid, inflight, key, attempt)
    except p.ApiError as exc:
        response = _error(sim, route, exc, req.stream)
    except _Hang:
        await asyncio.Event().wait()  # until the client goes away (the handler is then cancelled)
        raise AssertionError("unreachable") from None
    finally:
        if not (registered and inflight.detached):  # (a detached decode goes on without its client: see _Run)
            sim.stats.in_flight -= 1
            if registered:
                del sim.inflight[rid]
    return await _finish_response(sim, request, response)


async def _finish_response(sim: Sim, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """Count the response; when a response-count limit is armed, send it completely first so the limit is exact."""
    if sim.counts_exactly and not response.prepared:
        await response.prepare(request)
        await response.write_eof()
    sim.count_response()
    return response


def _fault_error(sim: Sim, fault: str | None) -> None:
    if fault == "500":
        raise p.ApiError(500, "Internal server error: simulated fault", "InternalServerError")
    if fault == "503":
        raise p.ApiError(503, p.QUEUE_FULL, "503")
    if fault == "hang":
        raise _Hang


def _plan(sim: Sim, req: p.GenRequest, fault: str | None) -> tuple[text.Plan, int]:
    seed = sim.plan_seed(req.messages, req.sampling_key)
    if fault == "empty":
        return text.EMPTY_PLAN, seed
    plan = text.make_plan(seed, sim.config.mean_output_tokens, req.thinking)
    if fault == "answer_in_reasoning" and plan.thinking:
        plan = text.with_answer_in_reasoning(plan)
    return plan, seed


async def _generate(
    sim: Sim, request: web.Request, req: p.GenRequest, rid: str, inflight: Inflight, key: str, attempt: int
) -> web.StreamResponse:
    fault = sim.faults.draw(key, attempt)
    broken = sim.config.fail_503_after
    if broken is not None and sim.stats.responses >= broken:
        fault = "503"
    elif sim.in_503_burst():
        fault = "503"
        sim.stats.faults["burst_503"] += 1
    if fault is not None:
        sim.stats.faults[fault] += 1
        _fault_error(sim, fault)
    plan, seed = _plan(sim, req, fault)
    natural = plan.natural_tokens
    limit = natural if req.max_new_tokens is None else min(natural, req.max_new_tokens)
    cached = sim.prefix_cache.lookup(req.messages, req.prompt_tokens)
    # A stalled request holds no decode slot: the stuck part is the server, not the batch.
    job = None if fault == "stall" else _submit(sim, limit, req.prompt_tokens - cached)
    inflight.job = job
    run = _Run(sim, req, rid, inflight, key, plan, seed, natural, limit, fault, cached)
    if req.stream:
        if sim.config.trickle_s > 0:
            sim.stats.faults["trickle"] += 1
        return await run.stream(request)
    return await run.respond(request)


def _submit(sim: Sim, tokens: int, prefill: int) -> Job | None:
    if sim.engine is None:
        return None
    try:
        return sim.engine.submit(tokens, prefill)
    except QueueFull:
        sim.stats.faults["queue_full"] += 1
        raise p.ApiError(503, p.QUEUE_FULL, "503") from None


class _Run:
    """One admitted generation: waits for its decode (or stalls, or trickles) and renders it for its route."""

    def __init__(
        self,
        sim: Sim,
        req: p.GenRequest,
        rid: str,
        inflight: Inflight,
        key: str,
        plan: text.Plan,
        seed: int,
        natural: int,
        limit: int,
        fault: str | None,
        cached: int = 0,
    ) -> None:
        self.sim, self.req, self.rid, self.inflight, self.key = sim, req, rid, inflight, key
        self.plan, self.seed, self.natural, self.limit, self.fault = plan, seed, natural, limit, fault
        self.job = inflight.job
        self.started = time.time()
        self.created = int(self.started)
        self.stopped_at: int | None = None  # tokens shown when a stall or trickle was aborted
        self.ended = False  # recorded as a generation, or counted as cancelled
        self.cached = cached  # prompt tokens the prefix cache held

    # -- decoding ---------------------------------------------------------------------------------------------
    def _outcome(self) -> p.Outcome:
        job = self.job
        if job is None:
            tokens = self.limit if self.stopped_at is None else self.stopped_at
            aborted = self.inflight.aborted
        else:
            tokens, aborted = int(job.generated), job.aborted
        if aborted:
            return p.Outcome(self.plan, tokens, "abort")
        return p.Outcome(self.plan, tokens, "stop" if tokens >= self.natural else "length")

    async def _wait(self) -> None:
        if self.job is not None:
            await asyncio.shield(self.job.done)
        elif self.fault == "stall":
            await self.inflight.pause(None)  # a non-streaming stall is a hang that /abort_request can end
            self.stopped_at = 0

    def _cancelled(self) -> None:
        """The client went away before the end: stop the decode and count it once."""
        if self.ended:
            return
        self.ended = True
        if self.job is not None and self.job.state != "done" and self.sim.engine is not None:
            self.sim.engine.abort(self.job)
        self.sim.stats.cancelled += 1

    def _detach(self) -> bool:
        """The client of a non-streaming request went away. SGLang looks for that only after `disconnect_check_s`
        without output (tokenizer_manager.py `_wait_one_response`), and a running request has output every few
        tokens: it decodes to its end for nobody unless `/abort_request` names it. With that option set, the decode
        goes on here too (still in `/v1/loads`, still abortable by its rid). Returns whether it does."""
        check, job = self.sim.config.disconnect_check_s, self.job
        if check <= 0 or job is None or job.state == "done":
            return False
        self.inflight.detached = True
        task = asyncio.get_running_loop().create_task(self._decode_for_nobody(job, check))
        self.sim.orphans.add(task)
        task.add_done_callback(self.sim.orphans.discard)
        return True

    async def _decode_for_nobody(self, job: Job, check: float) -> None:
        try:
            while not job.done.done():
                await asyncio.wait({job.done}, timeout=check)
                if not job.done.done() and job.state == "waiting" and self.sim.engine is not None:
                    self.sim.engine.abort(job)  # queued, no output for `check` s: SGLang looks and drops it
            self._record(self._outcome())  # a generation nobody receives, or (aborted) a cancel
        finally:
            self.sim.stats.in_flight -= 1
            self.sim.inflight.pop(self.rid, None)

    async def _progress(self) -> AsyncIterator[tuple[int, bool]]:
        """(tokens so far, finished) at each point the stream should flush."""
        if self.job is not None:
            async for point in self._engine_progress(self.job):
                yield point
            return
        step = max(1, self.sim.config.stream_chunk_tokens)
        trickle = self.sim.config.trickle_s
        stall_at = max(0, min(2 * step, self.limit - 1)) if self.fault == "stall" else None
        sent = 0
        for t in range(step, self.limit + step, step):
            t = min(t, self.limit)
            if stall_at is not None and t >= stall_at:
                if stall_at > sent:
                    yield stall_at, False
                await self.inflight.pause(None)  # no more bytes until /abort_request (or the client leaves)
                sent = stall_at
                break
            if trickle > 0:
                await self.inflight.pause(trickle)
                if self.inflight.aborted:
                    break
            yield t, t >= self.limit
            sent = t
        else:
            if self.limit == 0:
                yield 0, True
            return
        self.stopped_at = sent
        yield sent, True

    async def _engine_progress(self, job: Job) -> AsyncIterator[tuple[int, bool]]:
        engine, sent = self.sim.engine, -1
        assert engine is not None
        interval = self.sim.config.trickle_s or self.sim.config.stream_interval_s
        while True:
            finished = job.state == "done"
            now = int(job.generated) if finished else engine.progress(job)
            if now > sent or finished:
                yield now, finished
                sent = now
            if finished:
                return
            await asyncio.wait({job.done}, timeout=interval)

    def _record(self, outcome: p.Outcome) -> None:
        if self.ended:
            return
        self.ended = True
        if outcome.finish == "abort":
            self.sim.stats.cancelled += 1
        else:
            self.sim.stats.generated(self.key, self.req.rid, self.req.prompt_tokens, outcome.tokens)

    def _extras(self, outcome: p.Outcome, meta: bool) -> dict[str, Any]:
        sim, req = self.sim, self.req
        cached = sim.cache_report(self.cached)
        spec = sim.spec_details(self.seed, outcome.tokens)
        usage = p.usage(req, outcome, sim.v, cached)
        extras: dict[str, Any] = {"usage": usage, "spec": spec}
        if meta:
            extras["meta_info"] = self._meta_info(outcome, cached, spec, usage["reasoning_tokens"])
        return extras

    def _meta_info(
        self, outcome: p.Outcome, cached: int | None, spec: dict[str, Any] | None, reasoning: int
    ) -> dict[str, Any]:
        now = time.time()
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": p.finish_object(outcome),
            "prompt_tokens": self.req.prompt_tokens,
            "completion_tokens": outcome.tokens,
            "cached_tokens": cached or 0,
            "reasoning_tokens": reasoning,
            "weight_version": "default",
            ("total_retractions" if self.sim.v < (0, 5, 10) else "num_retractions"): 0,
            "e2e_latency": now - self.started,
            "response_sent_to_client_ts": now,
        }
        if spec is not None:
            meta.update(spec)
        return meta

    # -- non-streaming ----------------------------------------------------------------------------------------
    async def respond(self, request: web.Request) -> web.StreamResponse:
        if self.job is not None or self.fault == "stall":
            try:
                await self._wait()
            except asyncio.CancelledError:
                if not self._detach():
                    self._cancelled()
                raise
        outcome = self._outcome()
        self._record(outcome)
        route = self.req.route
        extras = self._extras(outcome, route == "generate" or self.req.return_meta_info)
        if route == "chat":
            body = p.chat_response(self.req, outcome, self.rid, self.created, self.sim.v, extras)
        elif route == "completions":
            body = p.completion_response(self.req, outcome, self.rid, self.created, extras["usage"])
        else:
            body = self._generate_body(outcome, extras["meta_info"])
        if self.fault == "invalid_json":
            return _json_response(body[: len(body) // 2])
        if self.fault == "reset":
            return await _reset_midway(request, body, "application/json")
        return _json_response(body)

    def _generate_body(self, outcome: p.Outcome, meta: dict[str, Any]) -> bytes:
        _, content = p.split(self.req, self.plan, outcome.tokens)
        return orjson.dumps({"text": content, "output_ids": p.output_ids(self.seed, outcome.tokens), "meta_info": meta})

    # -- streaming --------------------------------------------------------------------------------------------
    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        render = {"chat": self._chat_events, "completions": self._completion_events}.get(
            self.req.route, self._generate_events
        )
        # Instant streams go out in one write; timed, trickled and stalled ones flush every event.
        paced = self.job is not None or self.fault == "stall" or self.sim.config.trickle_s > 0
        buffered = b""
        broken = self.fault in ("reset", "invalid_json")
        count = 0
        try:
            async for events, final in render():
                buffered += events
                count += 1
                if broken and count >= 2:
                    if self.fault == "reset":
                        await response.write(buffered)
                        _abort_transport(request)
                        return response
                    await response.write(buffered[:-7] + b"\n\n" + p.DONE)  # a cut-off JSON event
                    return response
                if paced or final:
                    await response.write(buffered)
                    buffered = b""
            await response.write_eof()
        except asyncio.CancelledError:
            self._cancelled()
            raise
        except ConnectionResetError:  # the client left between two events
            self._cancelled()
        return response

    async def _chat_events(self) -> AsyncIterator[tuple[bytes, bool]]:
        chunks = p.ChatChunks(self.req, self.rid, self.created, self.sim.old_shape)
        yield chunks.role(), False
        async for tokens, finished in self._progress():
            out = chunks.deltas(self.plan, tokens, finished)
            if finished:
                outcome = self._outcome()
                self._record(outcome)
                out += chunks.finish(outcome)
                if self.req.include_usage:
                    out += chunks.usage(self._extras(outcome, False)["usage"])
                out += p.DONE
            yield out, finished

    async def _completion_events(self) -> AsyncIterator[tuple[bytes, bool]]:
        sent = 0
        async for tokens, finished in self._progress():
            _, content = p.split(self.req, self.plan, tokens)
            outcome = self._outcome() if finished else None
            choice = {
                "index": 0,
                "text": content[sent:],
                "logprobs": None,
                "finish_reason": outcome.finish if outcome else None,
                "matched_stop": outcome.matched_stop if outcome else None,
            }
            sent = len(content)
            head = {"id": self.rid, "object": "text_completion", "created": self.created, "model": self.req.model}
            out = p.sse({**head, "choices": [choice]})
            if outcome is not None:
                self._record(outcome)
                if self.req.include_usage:
                    usage = {k: v for k, v in self._extras(outcome, False)["usage"].items() if v is not None}
                    out += p.sse({**head, "choices": [], "usage": usage})
                out += p.DONE
            yield out, finished

    async def _generate_events(self) -> AsyncIterator[tuple[bytes, bool]]:
        async for tokens, finished in self._progress():
            _, content = p.split(self.req, self.plan, tokens)
            if finished:
                outcome = self._outcome()
                self._record(outcome)
                meta = self._extras(outcome, True)["meta_info"]
            else:
                meta = {"id": self.rid, "finish_reason": None, "completion_tokens": tokens}
            out = p.sse({"text": content, "output_ids": p.output_ids(self.seed, tokens), "meta_info": meta})
            yield out + (p.DONE if finished else b""), finished


def _abort_transport(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _reset_midway(request: web.Request, body: bytes, content_type: str) -> web.StreamResponse:
    """Send the headers and half the body, then reset the connection."""
    response = web.StreamResponse(headers={"Content-Type": content_type})
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    _abort_transport(request)
    return response
