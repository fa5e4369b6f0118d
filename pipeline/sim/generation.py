"""The generation routes: `/v1/chat/completions`, `/v1/completions`, `/generate`.

One path for all three: parse and validate (the 400s), count, draw a fault, plan the output, decode (instantly or
through the batching engine), then write the route's body or SSE events. Instant mode never awaits anything but
the request body, so the simulator is never the bottleneck of the pipeline's own benchmarks.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from ..sglang.releases import STREAM_ABORT_ERROR_CHUNK, STREAM_VALIDATION_AS_STATUS
from . import protocol as p
from . import text
from .admitted import Admitted, json_response
from .engine import Job, QueueFull
from .replies import scripted
from .state import Inflight, Sim
from .tool_calls import tool_call_for

SIM = web.AppKey("sim", Sim)


class _Hang(Exception):
    pass


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
        return json_response(orjson.dumps({"error": {"message": exc.message}}), exc.status)
    if stream and sim.v < STREAM_VALIDATION_AS_STATUS and exc.status == 400:
        # 0.5.9 validates inside the stream: HTTP 200, an error event, then [DONE].
        return _sse_response(p.sse({"error": exc.body()}) + p.DONE)
    if stream and exc.status == 503:
        # An abort with a status code after the 200: an error event (0.5.9: a normal abort finish), then [DONE].
        return _sse_response(
            p.sse(exc.stream_body() if sim.v >= STREAM_ABORT_ERROR_CHUNK else _abort_chunk(route)) + p.DONE
        )
    return json_response(orjson.dumps(exc.body()), exc.status)


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
    if req.tools:
        sim.stats.with_tools[key] += 1
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
        if not (registered and inflight.detached):  # (a detached decode goes on without its client: admitted.py)
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
    script = scripted(sim.replies, req.messages) if sim.replies and req.route == "chat" else None
    if script is not None:  # its own texts; it says itself whether it loops (no --loop-share draw)
        plan = text.scripted_plan(script, req.thinking)
    else:
        plan = text.make_plan(seed, sim.config.mean_output_tokens, req.thinking)
    if fault == "answer_in_reasoning" and plan.thinking:
        plan = text.with_answer_in_reasoning(plan)
    elif plan.thinking and script is None and text.loop_drawn(seed, sim.config.loop_share):
        plan = text.with_loop(plan, seed)
        sim.stats.faults["loop"] += 1
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
    req.tool_call = tool_call_for(req, attempt)
    if req.tool_call is not None:
        req.tool_parser = sim.resolved.get("tool_call_parser") is not None
        sim.stats.faults["tool_call"] += 1
    natural = plan.natural_tokens
    limit = plan.limit(req.max_new_tokens)
    cached = sim.prefix_cache.lookup(req.messages, req.prompt_tokens)
    # A stalled request holds no decode slot: the stuck part is the server, not the batch.
    job = None if fault == "stall" else _submit(sim, limit, req.prompt_tokens - cached)
    inflight.job = job
    run = Admitted(sim, req, rid, inflight, key, plan, seed, natural, limit, fault, cached)
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
