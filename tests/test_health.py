"""The health monitor against real simulators over HTTP: up → down → back in the pool → healthy, and retirement.

Probes go over the wire; time is an injected clock where the monitor decides by it (cooldowns, re-checks), and
real but scaled down where the server's behaviour is the point (a /health that takes several times the probe
timeout, a server that drops its port for half a second).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest

from pipeline.config import ClientConfig, Config, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.health import HealthMonitor
from pipeline.endpoints.pool import Pool
from pipeline.endpoints.state import DOWN, HEALTHY, RETIRED, EndpointState
from pipeline.engine.dispatcher import Dispatcher
from pipeline.engine.metrics import Metrics
from pipeline.errors import EndpointError, RegenError
from pipeline.records import Prompt
from pipeline.sim import SimConfig, serve
from tests.helpers.memory_sink import MemorySink

MODEL = "Qwen3.6-27B"
CFG = Config(generation=GenerationConfig(model=MODEL, max_tokens=2048), client=ClientConfig(max_attempts=1))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sim_config(**knobs: Any) -> SimConfig:
    return SimConfig(served_model_name=MODEL, reasoning_parser="qwen3", mean_output_tokens=40, **knobs)


def prompt(i: int) -> Prompt:
    return Prompt(id=f"p{i}", messages=({"role": "user", "content": f"Question {i}: what is {i} squared?"},))


@asynccontextmanager
async def endpoints(*sims: SimConfig, clock: Callable[[], float] | None = None) -> AsyncIterator[Pool]:
    async with AsyncExitStack() as stack:
        states = []
        for config in sims:
            url = await stack.enter_async_context(serve(config))
            client = await stack.enter_async_context(
                EndpointClient(url, gen=CFG.generation, client=CFG.client, concurrency=4)
            )
            states.append(EndpointState(client=client, capacity=4))
        yield Pool(states, no_endpoint_timeout_s=0.5, **({"clock": clock} if clock else {}))


async def until(predicate: Callable[[], Awaitable[bool]]) -> None:
    """Poll every 10 ms, for at most 5 s, until `predicate` holds."""
    for _ in range(500):
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within 5 s")


async def ready_now(ep: EndpointState) -> None:
    """End the simulator's warm-up (POST /_sim/ready)."""
    async with httpx.AsyncClient(base_url=ep.url, timeout=10) as c:
        assert (await c.post("/_sim/ready")).status_code == 200


async def health_status(ep: EndpointState) -> int | None:
    """What /health answers right now: 200, another status, or None when the port is closed."""
    try:
        await ep.client.check_health(timeout_s=1.0)
    except RegenError as exc:
        return getattr(exc, "status", None)
    return 200


def test_a_hung_endpoint_is_marked_down_and_its_requests_move_elsewhere() -> None:
    """A frozen server accepts connections and never answers: only the probes reveal it."""

    async def scenario() -> None:
        # /health takes 1 s, five times the probe timeout; requests there never finish
        async with endpoints(sim_config(p_hang=1.0, health_delay_s=1.0), sim_config()) as pool:
            hung, good = pool.endpoints
            events: list[str] = []
            monitor = HealthMonitor(pool, interval_s=0.05, timeout_s=0.2, failures=2, on_event=events.append)
            sink = MemorySink()
            d = Dispatcher(CFG, pool, sink, Metrics())
            request = asyncio.create_task(d.process(prompt(1)))  # ties go to the first: the hung one
            probing = asyncio.create_task(monitor.run())
            done, _ = await asyncio.wait([request], timeout=5)  # waits without cancelling the request
            d.stopping = True
            for task in (probing, request):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            assert done == {request}, "the request was not moved off the hung endpoint"
            assert hung.state == DOWN
            assert [(r["endpoint"], r["attempts"]) for r in sink.accepted] == [(good.url, 1)]
            assert any("marked down after 2 failed health probes; 1 requests moved elsewhere" in e for e in events)
            assert good.state == HEALTHY  # the good endpoint's probes passed all along

    asyncio.run(scenario())


def test_one_failed_probe_is_not_enough_to_declare_an_endpoint_down() -> None:
    async def scenario() -> None:
        async with endpoints(sim_config(health_delay_s=1.0)) as pool:
            [ep] = pool.endpoints
            monitor = HealthMonitor(pool, timeout_s=0.2, failures=3)
            await monitor.check(ep)
            await monitor.check(ep)
            assert ep.state == HEALTHY and ep.kills == 0
            await monitor.check(ep)
            assert ep.state == DOWN and ep.kills == 1

    asyncio.run(scenario())


def test_down_then_probed_back_into_the_pool_then_healthy() -> None:
    """up → down (port closed) → still down while closed and while warming up → back in the pool → healthy. The
    warm-up lasts 10 minutes and the test ends it with POST /_sim/ready, so no step depends on the machine's speed."""

    async def scenario() -> None:
        clock = Clock()
        server = sim_config(down_after=1, down_for_s=0.3, warmup_s=600)
        async with endpoints(server, clock=clock) as pool:
            [ep] = pool.endpoints
            events: list[str] = []
            monitor = HealthMonitor(pool, timeout_s=0.5, failures=2, on_event=events.append, clock=clock)

            async def ready() -> bool:
                return await health_status(ep) == 200

            await ready_now(ep)
            await until(ready)  # past the first warm-up

            d = Dispatcher(CFG, pool, MemorySink(), Metrics())
            await d.process(prompt(1))  # the server's one response before it goes away

            async def port_closed() -> bool:
                return await health_status(ep) is None

            await until(port_closed)
            await monitor.check(ep)
            assert ep.state == HEALTHY  # one missed probe
            await monitor.check(ep)
            assert ep.state == DOWN and any("marked down after 2 failed health probes" in e for e in events)

            assert pool.due_for_probe() == []  # cooling down (1 s on the injected clock)
            clock.now += 1.0
            assert pool.due_for_probe() == [ep]
            if await health_status(ep) is None:
                await monitor.check(ep)  # refused again: down, and the next probe waits longer
                assert ep.state == DOWN and ep.down_until == clock.now + 2.0

            async def warming_up() -> bool:
                return await health_status(ep) == 503

            await until(warming_up)
            clock.now = ep.down_until
            await monitor.check(ep)
            assert ep.state == DOWN  # the port is open but /health says not ready

            await ready_now(ep)
            await until(ready)
            clock.now = ep.down_until
            await monitor.check(ep)
            assert ep.state != DOWN and any("healthy, in the pool" in e for e in events)
            assert await pool.acquire() is ep  # usable again
            await pool.release(ep, unused=True)

            sink = MemorySink()
            await Dispatcher(CFG, pool, sink, Metrics()).process(prompt(2))
            assert len(sink.accepted) == 1 and ep.state == HEALTHY

    asyncio.run(scenario())


def test_an_endpoint_that_comes_back_with_another_configuration_is_retired_for_good() -> None:
    async def scenario() -> None:
        async with endpoints(sim_config()) as pool:
            [ep] = pool.endpoints
            verified: list[str] = []

            async def verify(e: EndpointState) -> str | None:
                verified.append(e.url)
                return "restarted with a different configuration: speculative_algorithm None -> EAGLE"

            events: list[str] = []
            monitor = HealthMonitor(pool, verify=verify, on_event=events.append)
            pool.mark_down(ep, "connection refused")
            await monitor.check(ep)  # /health answers again: re-checked before it may take work
            assert verified == [ep.url]
            assert ep.state == RETIRED and "different configuration" in ep.last_error
            assert any("removed from the pool" in e for e in events)
            assert pool.due_for_probe() == []  # never probed back in
            with pytest.raises(EndpointError, match="retired"):
                await pool.acquire()  # no usable endpoint (no_endpoint_timeout_s is 0.5 s here)

    asyncio.run(scenario())


def test_an_endpoint_still_unreachable_at_its_recheck_stays_down_and_is_not_retired() -> None:
    async def scenario() -> None:
        clock = Clock()
        async with endpoints(sim_config(), clock=clock) as pool:
            [ep] = pool.endpoints

            async def verify(e: EndpointState) -> str | None:
                return "still unreachable"

            monitor = HealthMonitor(pool, verify=verify, clock=clock)
            pool.mark_down(ep, "unreachable at preflight")
            clock.now += 1.0
            await monitor.check(ep)
            assert ep.state == DOWN and ep.kills == 0
            assert ep.down_until == clock.now + 2.0  # backed off: the next probe waits longer

    asyncio.run(scenario())


def test_a_live_endpoint_is_rechecked_on_the_recheck_interval() -> None:
    async def scenario() -> None:
        clock = Clock()
        async with endpoints(sim_config(), clock=clock) as pool:
            [ep] = pool.endpoints
            rechecks: list[float] = []

            async def verify(e: EndpointState) -> str | None:
                rechecks.append(clock.now)
                return "restarted with a different configuration: context_length 262144 -> 8192"

            monitor = HealthMonitor(pool, interval_s=10.0, recheck_interval_s=60.0, verify=verify, clock=clock)
            for _ in range(8):  # 70 s of probes every 10 s
                await monitor.check(ep)
                clock.now += 10.0
            assert rechecks and ep.state == RETIRED

    asyncio.run(scenario())
