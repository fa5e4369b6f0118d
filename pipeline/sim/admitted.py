"""One admitted generation of the simulator: it waits for its decode (or stalls, or trickles), then answers as its
route does (a body or SSE events), and is counted once: a generation, or a cancel when its client left or
`/abort_request` named it. With `--disconnect-check`, a non-streaming decode whose client left goes on to its end,
as on SGLang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from ..sglang.releases import NUM_RETRACTIONS_KEY
from . import protocol as p
from . import text
from .engine import Job
from .state import Inflight, Sim


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


class Admitted:
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
        decoded = self.limit if self.job is None else int(self.job.generated)  # (instant mode: all of it)
        self.sim.stats.cancelled_tokens += decoded
        self.sim.stats.ended(decoded, self.plan.looping, self.plan.script is not None)

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
        trickle = self.sim.config.trickle_s
        step = self._step(paced=trickle > 0 or self.fault in ("stall", "reset", "invalid_json"))
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

    def _step(self, paced: bool) -> int:
        """Tokens per flush of an instant stream. With --stream-chunk-chars the deltas are cut by characters
        (protocol.pieces): a stream written whole in one go needs one point; a paced one, or one a fault breaks after
        its first deltas, about a delta a point."""
        chars = self.sim.config.stream_chunk_chars
        if chars <= 0:
            return max(1, self.sim.config.stream_chunk_tokens)
        return -(-chars // text.CHARS_PER_TOKEN) if paced else max(1, self.limit)

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
            self.sim.stats.cancelled_tokens += outcome.tokens
        else:
            self.sim.stats.generated(self.key, self.req.rid, self.req.prompt_tokens, outcome.tokens)
        self.sim.stats.ended(outcome.tokens, self.plan.looping, self.plan.script is not None)

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
            ("total_retractions" if self.sim.v < NUM_RETRACTIONS_KEY else "num_retractions"): 0,
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
            if self.req.return_meta_info or self.req.return_spec_details:
                self.sim.stats.spec_sent(self.req.rid, extras["spec"])
        elif route == "completions":
            body = p.completion_response(self.req, outcome, self.rid, self.created, extras["usage"])
        else:
            body = self._generate_body(outcome, extras["meta_info"])
        if self.fault == "invalid_json":
            return json_response(body[: len(body) // 2])
        if self.fault == "reset":
            return await _reset_midway(request, body, "application/json")
        return json_response(body)

    def _generate_body(self, outcome: p.Outcome, meta: dict[str, Any]) -> bytes:
        _, content = p.split(self.req, self.plan, outcome.tokens)
        return orjson.dumps({"text": content, "output_ids": p.output_ids(self.seed, outcome.tokens), "meta_info": meta})

    # -- streaming --------------------------------------------------------------------------------------------
    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        render = {"chat": self._chat_events, "completions": self._completion_events}.get(
            self.req.route, self._generate_events
        )
        # Instant streams go out in one write; timed, trickled and stalled ones flush every event.
        paced = self.job is not None or self.fault == "stall" or self.sim.config.trickle_s > 0
        buffered: list[bytes] = []
        broken = self.fault in ("reset", "invalid_json")
        count = 0
        try:
            await response.prepare(request)  # in the try: a client killed mid-run may be gone before the headers
            async for events, final in render():
                buffered.append(events)
                count += 1
                if broken and count >= 2:
                    if self.fault == "reset":
                        await response.write(b"".join(buffered))
                        _abort_transport(request)
                        return response
                    await response.write(b"".join(buffered)[:-7] + b"\n\n" + p.DONE)  # a cut-off JSON event
                    return response
                if paced or final:
                    await response.write(b"".join(buffered))
                    buffered.clear()
            await response.write_eof()
        except asyncio.CancelledError:
            self._cancelled()
            raise
        except ConnectionResetError:  # the client left before the headers or between two events
            self._cancelled()
        return response

    async def _chat_events(self) -> AsyncIterator[tuple[bytes, bool]]:
        chunks = p.ChatChunks(self.req, self.rid, self.created, self.sim.old_shape, self.sim.config.stream_chunk_chars)
        yield chunks.role(), False
        async for tokens, finished in self._progress():
            out = chunks.deltas(self.plan, tokens, finished)
            if finished:
                outcome = self._outcome()
                self._record(outcome)
                out += chunks.finish(outcome)
                extras = self._extras(outcome, False)  # once: it counts the request's spec steps
                if self.req.return_spec_details and extras["spec"] is not None:
                    out += chunks.sglext(extras["spec"])
                    self.sim.stats.spec_sent(self.req.rid, extras["spec"])
                if self.req.include_usage:
                    out += chunks.usage(extras["usage"])
                out += p.DONE
            yield out, finished

    async def _completion_events(self) -> AsyncIterator[tuple[bytes, bool]]:
        sent, chars = 0, self.sim.config.stream_chunk_chars
        head = {"id": self.rid, "object": "text_completion", "created": self.created, "model": self.req.model}
        async for tokens, finished in self._progress():
            _, content = p.split(self.req, self.plan, tokens)
            texts = p.pieces(content, sent, chars, finished) or [""]
            sent += sum(map(len, texts))
            outcome = self._outcome() if finished else None
            out = [p.sse({**head, "choices": [_completion_choice(piece, None)]}) for piece in texts[:-1]]
            out.append(p.sse({**head, "choices": [_completion_choice(texts[-1], outcome)]}))
            if outcome is not None:
                self._record(outcome)
                if self.req.include_usage:
                    usage = {k: v for k, v in self._extras(outcome, False)["usage"].items() if v is not None}
                    out.append(p.sse({**head, "choices": [], "usage": usage}))
                out.append(p.DONE)
            yield b"".join(out), finished

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


def _completion_choice(piece: str, outcome: p.Outcome | None) -> dict[str, Any]:
    return {
        "index": 0,
        "text": piece,
        "logprobs": None,
        "finish_reason": outcome.finish if outcome else None,
        "matched_stop": outcome.matched_stop if outcome else None,
    }


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
