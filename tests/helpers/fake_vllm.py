"""A small stand-in for vLLM's OpenAI server, on 127.0.0.1, for the tests of how regen reads a vLLM endpoint where
the real one (tests/real, CI) is too slow to start. It answers as vLLM 0.32 does, as measured against the real CPU
build (issue 37): the reasoning in `message.reasoning` / `delta.reasoning` (no `reasoning_content`), `content: null`
for a reasoning-only reply, `stop_reason` beside `finish_reason`, a stream ending in a `delta: {}` finish chunk, a
`choices: []` usage chunk and `[DONE]`; errors as `{"error": {message, type, param, code}}`; an unknown model is a
404; a request that does not fit `max_model_len` a 400 with `param: "max_tokens"`; `/version`, `/v1/models` with
`max_model_len` and `owned_by: "vllm"`, `/health`; no `/server_info`, `/get_server_info` or `/abort_request` (404).

Replies are given per user prompt (`replies`: prompt -> (reasoning, content, finish_reason)); any other prompt gets
a short default. A reply streams in `chunk` characters per delta, `delay_s` apart; a client that closes the stream
stops it (`closed` counts those), which is how vLLM aborts a request."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

MODEL = "tiny-qwen3"


@dataclass
class FakeVllm:
    replies: dict[str, tuple[str | None, str, str]] = field(default_factory=dict)
    max_model_len: int = 4096
    chunk: int = 8
    delay_s: float = 0.0
    requests: int = 0
    closed: int = 0  # streams the client closed before their end
    sent_before_close: list[int] = field(default_factory=list)  # characters each closed stream had sent
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        return app

    async def _health(self, _: web.Request) -> web.Response:  # (handlers are coroutines: newer aiohttp insists)
        return web.Response(status=200)

    async def _version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def _models(self, _: web.Request) -> web.Response:
        card = {"id": MODEL, "object": "model", "created": 0, "owned_by": "vllm", "root": "/models/tiny",
                "parent": None, "max_model_len": self.max_model_len, "permission": []}  # fmt: skip
        return web.json_response({"object": "list", "data": [card]})

    @staticmethod
    def _error(status: int, message: str, kind: str, param: str | None = None) -> web.Response:
        body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
        return web.json_response(body, status=status)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests += 1
        self.bodies.append(body)
        if body.get("model") != MODEL:
            return self._error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError", "model")
        prompt = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
        prompt_tokens = sum(len(str(m.get("content") or "")) // 4 + 4 for m in body["messages"])
        max_tokens = int(body.get("max_tokens") or 16)
        if prompt_tokens + max_tokens > self.max_model_len:
            return self._error(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
                f"length is {self.max_model_len} tokens and your request has {prompt_tokens} input tokens "
                f"({max_tokens} > {self.max_model_len} - {prompt_tokens}).",
                "BadRequestError",
                "max_tokens",
            )
        reasoning, content, finish = self.replies.get(prompt, ("Let me think. 2 + 2 = 4.", "4", "stop"))
        tokens = (len(reasoning or "") + len(content)) // 4 + 1
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + tokens, "completion_tokens": tokens,
                 "prompt_tokens_details": None}  # fmt: skip
        head = {"id": f"chatcmpl-{self.requests}", "created": int(time.time()), "model": MODEL}
        if not body.get("stream"):
            message = {"role": "assistant", "content": content or None, "refusal": None, "annotations": None,
                       "audio": None, "function_call": None, "tool_calls": [], "reasoning": reasoning}  # fmt: skip
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            return web.json_response({**head, "object": "chat.completion", "choices": [choice], "usage": usage})
        return await self._stream(request, head, reasoning, content, finish, usage)

    async def _stream(
        self, request: web.Request, head: dict[str, Any], reasoning: str | None, content: str, finish: str,
        usage: dict[str, Any],
    ) -> web.StreamResponse:  # fmt: skip
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        head = {**head, "object": "chat.completion.chunk"}

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + orjson.dumps({**head, "choices": choices, **extra}) + b"\n\n"

        def delta(piece: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": piece, "logprobs": None, "finish_reason": finish_reason,
                    "stop_reason": None}  # fmt: skip

        sent = 0
        try:
            await response.write(event([delta({"role": "assistant", "content": ""})]))
            for key, text in (("reasoning", reasoning or ""), ("content", content)):
                for i in range(0, len(text), self.chunk):
                    await response.write(event([delta({key: text[i : i + self.chunk]})]))
                    sent += len(text[i : i + self.chunk])
                    if self.delay_s:
                        await asyncio.sleep(self.delay_s)
            await response.write(event([delta({}, finish)]))
            await response.write(event([], usage=usage))
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.closed += 1
            self.sent_before_close.append(sent)
            raise
        return response


@contextmanager
def serve(fake: FakeVllm) -> Iterator[str]:
    """Run `fake` on 127.0.0.1 in a thread of its own (so a `regen` subprocess or another event loop can call it);
    yields its base URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(fake.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{holder['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
