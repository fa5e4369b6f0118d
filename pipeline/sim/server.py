"""The simulator's HTTP server (aiohttp + orjson): routes, auth, lifecycle, and its two entry points.

`serve(config)` runs it in-process (an async context manager yielding the base URL); `run_forever(config)` is
`regen sim`. Generation handlers live in `generation.py`; what the info routes report lives in `state.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from ..sglang.releases import READY_ROUTE
from ..sglang.resolution import StartupRefused as SimStartupError
from . import protocol as p
from .config import SimConfig, add_arguments, config_from_args
from .generation import SIM, chat, completions, generate
from .state import Sim

__all__ = ["SimConfig", "SimStartupError", "add_arguments", "config_from_args", "run_forever", "serve"]

_AUTH_EXEMPT = ("/health", "/health_generate", "/ready", "/ping", "/metrics", "/_sim/")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.app[SIM].config.api_key
    if key and not request.path.startswith(_AUTH_EXEMPT):
        if request.headers.get("Authorization", "") != f"Bearer {key}":
            return _json({"error": "Unauthorized"}, 401)
    return await handler(request)


async def _sim_ready(request: web.Request) -> web.Response:
    """End the warm-up now (`--warmup`): a test holds a server in warm-up until it has seen a client wait on it."""
    request.app[SIM].warmed = True
    return web.json_response({"healthy": request.app[SIM].healthy()})


async def _health(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    if sim.config.health_delay_s:
        await asyncio.sleep(sim.config.health_delay_s)
    status = 200 if sim.healthy() else 503
    sim.health_probes[status] += 1
    return web.Response(status=status)


async def _ready(request: web.Request) -> web.Response:
    if request.app[SIM].v < READY_ROUTE:
        raise web.HTTPNotFound()
    return web.Response(status=200 if request.app[SIM].healthy() else 503)


async def _server_info(request: web.Request) -> web.Response:
    return _json(request.app[SIM].server_info())


async def _model_info(request: web.Request) -> web.Response:
    return _json(request.app[SIM].model_info())


async def _models(request: web.Request) -> web.Response:
    return _json({"object": "list", "data": [request.app[SIM].model_card()]})


async def _model(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    name = request.match_info["model"]
    if name != sim.served:
        error = {
            "message": f"The model '{name}' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
        return _json({"error": error}, 404)
    return _json(sim.model_card())


async def _loads(request: web.Request) -> web.Response:
    return _json(request.app[SIM].loads())


async def _metrics(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    if not sim.resolved.get("enable_metrics"):
        raise web.HTTPNotFound()
    return web.Response(text=sim.metrics(), content_type="text/plain", charset="utf-8")


async def _abort_request(request: web.Request) -> web.Response:
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        return _json(p.bad_request("body: Input should be a valid dictionary").body(), 400)
    rid = body.get("rid")
    request.app[SIM].abort(None if rid is None else str(rid), bool(body.get("abort_all")))
    return web.Response(status=200)


async def _flush_cache(request: web.Request) -> web.Response:
    request.app[SIM].prefix_cache.clear()
    return web.Response(
        text="Cache flushed.\nPlease check backend logs for more details. (When there are running "
        "or waiting requests, the operation will not be performed.)\n"
    )


async def _separate_reasoning(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    raw = str(body.get("text", ""))
    head, sep, tail = raw.partition("</think>")
    if not sep:
        return _json({"text": "", "reasoning_text": raw.removeprefix("<think>")})
    return _json({"text": tail, "reasoning_text": head.removeprefix("<think>")})


async def _sim_stats(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    running, waiting = sim.running_waiting()
    return _json(
        {
            **sim.stats.snapshot(log=request.query.get("log") == "1", brief=request.query.get("brief") == "1"),
            "prefix_cache": sim.prefix_cache.snapshot(),
            "running": running,
            "queued": waiting,
            "healthy": sim.healthy(),
            "health_probes": {str(k): v for k, v in sim.health_probes.items()},
        }
    )


async def _sim_reset(request: web.Request) -> web.Response:
    request.app[SIM].stats.reset()
    request.app[SIM].prefix_cache.reset_counters()
    return web.Response(status=200)


@web.middleware
async def _close_after(request: web.Request, handler: Handler) -> web.StreamResponse:
    """--close-connections: the response, whole, then the connection closed without a word."""
    resp = await handler(request)
    if not resp.prepared:
        await resp.prepare(request)
    await resp.write_eof()
    if request.transport is not None:
        request.transport.close()
    return resp


def build_app(sim: Sim) -> web.Application:
    # Without an api key there is nothing to check: no middleware on the hot path.
    middlewares: list[Any] = [_auth] if sim.config.api_key else []
    if sim.config.close_connections:
        middlewares.append(_close_after)
    app = web.Application(middlewares=middlewares, client_max_size=1 << 30)
    app[SIM] = sim
    r = app.router
    for path in ("/v1/chat/completions", "/invocations"):
        r.add_post(path, chat)
    r.add_post("/v1/completions", completions)
    r.add_post("/generate", generate)
    for path in ("/health", "/health_generate", "/ping"):
        r.add_get(path, _health)
    r.add_get("/ready", _ready)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, _server_info)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, _model_info)
    r.add_get("/v1/models", _models)
    r.add_get("/v1/models/{model}", _model)
    for path in ("/v1/loads", "/get_load"):
        r.add_get(path, _loads)
    r.add_get("/metrics", _metrics)
    r.add_post("/abort_request", _abort_request)
    r.add_route("*", "/flush_cache", _flush_cache)
    r.add_post("/separate_reasoning", _separate_reasoning)
    r.add_get("/_sim/stats", _sim_stats)
    r.add_post("/_sim/reset", _sim_reset)
    r.add_post("/_sim/ready", _sim_ready)
    return app


class _Server:
    """Sockets and the aiohttp runner for one Sim: a bound-but-closed port during slow start, then listening."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.runner = web.AppRunner(build_app(sim), handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        self.site: web.SockSite | None = None
        self.stopped = asyncio.Event()
        self._opener: asyncio.Task[None] | None = None

    async def start(self) -> str:
        config = self.sim.config
        await self.runner.setup()
        sock = self._bind(config.port)
        self.sim.port = sock.getsockname()[1]
        # Bound but not listening: connections are refused, as while SGLang loads weights.
        self.site = web.SockSite(self.runner, sock)
        self.sim.on_die = self.die
        self.sim.on_down = self.go_down
        if config.slow_start_s > 0:
            self._opener = asyncio.create_task(self._open_later(config.slow_start_s))
        else:
            await self._open()
        host = f"[{config.host}]" if ":" in config.host else config.host
        return f"http://{host}:{self.sim.port}"

    def _bind(self, port: int) -> socket.socket:
        host = self.sim.config.host
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.setblocking(False)
        return sock

    async def _open(self) -> None:
        assert self.site is not None
        await self.site.start()
        self.sim.listening_at = time.monotonic()

    async def _open_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self._open()

    def die(self) -> None:
        """die_after reached: stop listening and drop every connection (as a crashed server would)."""
        asyncio.get_running_loop().create_task(self._die())

    async def _die(self) -> None:
        await asyncio.sleep(0)  # let the response that reached the limit leave first
        await self._unplug()
        self.stopped.set()

    def go_down(self, seconds: float) -> None:
        """down_after reached: as `die`, then listen again on the same port after `seconds` (a restarted server)."""
        self._opener = asyncio.get_running_loop().create_task(self._down(seconds))

    async def _down(self, seconds: float) -> None:
        await asyncio.sleep(0)
        await self._unplug()
        self.sim.listening_at = None  # /health would say "not ready" if anyone could reach it
        self.sim.warmed = False  # a restarted server warms up again (--warmup), whatever /_sim/ready said before
        await asyncio.sleep(seconds)
        self.site = web.SockSite(self.runner, self._bind(self.sim.port))
        await self._open()

    async def _unplug(self) -> None:
        """Close the listening socket and abort every open connection; the batch goes with the process, decodes
        whose client had left included (--disconnect-check)."""
        self.sim.abort(None, abort_all=True)
        if self.site is not None:
            with contextlib.suppress(RuntimeError):
                await self.site.stop()
        server = self.runner.server
        if server is not None:
            for handler in server.connections:
                transport = handler.transport
                if transport is not None:
                    transport.abort()

    async def close(self) -> None:
        if self._opener is not None:
            self._opener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._opener
        server = self.runner.server
        if server is not None:
            for handler in server.connections:
                handler.force_close()  # cancels hung handlers instead of waiting for them
        if self.sim.engine is not None:
            self.sim.engine.close()
        await self.runner.cleanup()


@contextlib.asynccontextmanager
async def serve(config: SimConfig) -> AsyncIterator[str]:
    """Run a simulator on this event loop; yields its base URL. Raises SimStartupError if SGLang would refuse."""
    server = _Server(Sim(config))
    url = await server.start()
    try:
        yield url
    finally:
        await server.close()


async def run_forever(config: SimConfig) -> None:
    """`regen sim`: print the base URL first (flushed), serve until SIGINT, or drain on SIGTERM, then exit.

    A startup rejection prints SGLang's message on stderr and exits like SGLang (2 for a flag argparse would
    refuse, 1 otherwise). die_after ends the process with exit status 1, as a crash would.
    """
    try:
        sim = Sim(config)
    except SimStartupError as exc:
        if exc.kind == "argparse":
            print(f"usage: regen sim [options]\nregen sim: error: {exc.message}", file=sys.stderr, flush=True)
        else:
            print(f"{exc.kind}: {exc.message}", file=sys.stderr, flush=True)
        raise SystemExit(exc.exit_code) from None
    for warning in sim.warnings:
        sim.log(f"WARNING {warning}")
    server = _Server(sim)
    url = await server.start()
    print(url, flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    force = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, lambda: _drain(sim, stop, force))
    try:
        waiters = {asyncio.create_task(stop.wait()), asyncio.create_task(server.stopped.wait())}
        _done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if sim.draining and not sim.dead:
            await _wait_drained(sim, force)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)
        await server.close()
    if sim.dead:
        raise SystemExit(1)


def _drain(sim: Sim, stop: asyncio.Event, force: asyncio.Event) -> None:
    if sim.draining:
        force.set()  # a second SIGTERM: stop now
        return
    sim.draining = True  # /health answers 503; new requests are still accepted
    sim.log(f"Gracefully exiting... remaining number of requests {sim.stats.in_flight}")
    stop.set()


async def _wait_drained(sim: Sim, force: asyncio.Event) -> None:
    deadline = time.monotonic() + sim.config.drain_timeout_s
    while sim.stats.in_flight > 0 and time.monotonic() < deadline and not force.is_set():  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # polling: in-flight changes in many places, and this runs once at exit
