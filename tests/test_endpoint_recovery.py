"""Recovery (issue 20, problem 3): an endpoint that answers `/health` again is back in the pool within seconds.

Real simulators served in-process over HTTP on 127.0.0.1, the real Pool, HealthMonitor and Dispatcher, and real
but scaled-down time: requests of ~0.5 s, probes every 0.5 s, a server whose port closes for 2 s after its
twentieth response with eight requests in flight. The pool's cooldown cap is the production default (30 s), the
value that used to keep a restarted server out of the pool long after it answered again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest

from pipeline.config import ClientConfig, Config, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.health import HealthMonitor
from pipeline.endpoints.pool import Pool
from pipeline.endpoints.state import DOWN, EndpointState
from pipeline.engine.dispatcher import Dispatcher
from pipeline.engine.metrics import Metrics
from pipeline.errors import EndpointError
from pipeline.records import Prompt
from pipeline.sim import SimConfig, serve
from tests.helpers.memory_sink import MemorySink

MODEL = "Qwen3.6-27B"
SLOTS = 8
CFG = Config(
    generation=GenerationConfig(model=MODEL, max_tokens=2048),
    client=ClientConfig(max_attempts=4, request_timeout_s=10.0, connect_timeout_s=0.5, backoff_base_s=0.02),
)


def sim_config(**knobs: Any) -> SimConfig:
    """~0.5 s requests: 300-token completions at 4,800 tok/s shared by 8 slots."""
    return SimConfig(
        served_model_name=MODEL,
        reasoning_parser="qwen3",
        mean_output_tokens=300,
        max_running_requests=SLOTS,
        decode_tokens_per_s=SLOTS * 600,
        **knobs,
    )


def prompt(i: int) -> Prompt:
    return Prompt(id=f"p{i}", messages=({"role": "user", "content": f"Question {i}: what is {i} squared?"},))


@asynccontextmanager
async def pool_of(*sims: SimConfig, no_endpoint_timeout_s: float = 30.0) -> AsyncIterator[Pool]:
    async with AsyncExitStack() as stack:
        states = []
        for config in sims:
            url = await stack.enter_async_context(serve(config))
            client = await stack.enter_async_context(EndpointClient(url, gen=CFG.generation, client=CFG.client))
            states.append(EndpointState(client=client, capacity=SLOTS))
        yield Pool(states, max_cooldown_s=30.0, no_endpoint_timeout_s=no_endpoint_timeout_s)


async def health_ok(http: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await http.get(f"{url}/health", timeout=0.5)).status_code == 200
    except httpx.HTTPError:
        return False


async def requests_seen(http: httpx.AsyncClient, url: str) -> int:
    return int((await http.get(f"{url}/_sim/stats", timeout=2)).json()["requests"])


async def until(predicate: Callable[[], Awaitable[bool]], within_s: float) -> float:
    """Poll every 20 ms until `predicate` holds; the time it first held."""
    for _ in range(int(within_s / 0.02)):
        if await predicate():
            return time.monotonic()
        await asyncio.sleep(0.02)
    raise AssertionError(f"condition not reached within {within_s} s")


async def watch_outage(ep: EndpointState) -> tuple[float, float]:
    """(seconds from /health answering again to the first request sent there, then to full capacity again)."""
    async with httpx.AsyncClient() as http:

        async def up() -> bool:
            return await health_ok(http, ep.url)

        async def down() -> bool:
            return not await health_ok(http, ep.url)

        await until(down, 10)
        back = await until(up, 10)
        seen = await requests_seen(http, ep.url)

        async def used() -> bool:
            return await requests_seen(http, ep.url) > seen

        async def full() -> bool:
            return ep.state != DOWN and not ep.ramp

        first = await until(used, 15)  # the old pool took ~30 s (its cooldown cap) to try it again
        return first - back, await until(full, 15) - back


def test_an_endpoint_is_used_again_within_a_second_of_health_answering() -> None:
    async def scenario() -> tuple[float, float, list[str]]:
        async with pool_of(sim_config(seed=1), sim_config(seed=2, down_after=20, down_for_s=2.0)) as pool:
            flapping = pool.endpoints[1]
            monitor = HealthMonitor(pool, interval_s=0.5, timeout_s=0.5, failures=2)
            sink = MemorySink()
            d = Dispatcher(CFG, pool, sink, Metrics())
            queue: asyncio.Queue[Prompt | None] = asyncio.Queue()
            for i in range(2000):  # more than the test needs: the pool stays saturated throughout
                queue.put_nowait(prompt(i))
            async with asyncio.TaskGroup() as tg:
                probing = tg.create_task(monitor.run())
                feeder = tg.create_task(d.feed(queue, tg))
                try:
                    to_use, to_full = await watch_outage(flapping)
                finally:
                    d.stopping = True
                    for task in [probing, feeder, *d.inflight]:
                        task.cancel()
            return to_use, to_full, sink.ids

    to_use, to_full, ids = asyncio.run(scenario())
    assert len(ids) == len(set(ids)) and len(ids) > 20
    # probes every 0.5 s, then the first request at once (~0.5 s; the old pool: ~30 s, its cooldown cap). The bounds
    # sit between the two, far from both: one event loop runs two servers, the pool and the monitor here, and a
    # loaded machine stretches it
    assert to_use <= 8.0, to_use
    # 2 then 3, 4 slots: full within about three ~0.5 s requests (the old pool: ~30 s before its first)
    assert to_full <= 12.0, to_full


def test_the_exit_message_says_what_became_of_each_endpoint() -> None:
    """One endpoint gone for good, one frozen (accepts, never answers): the message names both truthfully."""

    async def scenario() -> str:
        gone = sim_config(seed=1, down_after=4, down_for_s=60.0)
        frozen = sim_config(seed=2, p_hang=1.0, health_delay_s=60.0)
        async with pool_of(gone, frozen, no_endpoint_timeout_s=1.0) as pool:
            monitor = HealthMonitor(pool, interval_s=0.2, timeout_s=0.2, failures=2)
            d = Dispatcher(CFG, pool, MemorySink(), Metrics())
            async with asyncio.TaskGroup() as tg:
                probing = tg.create_task(monitor.run())
                try:
                    with pytest.raises(EndpointError) as caught:
                        await asyncio.gather(*(d.process(prompt(i)) for i in range(12)))
                finally:
                    d.stopping = True
                    probing.cancel()
            return str(caught.value)

    message = asyncio.run(scenario())
    gone, frozen = message.split(": ", 1)[1].split("; ")
    assert "healthy" not in message and "(ok)" not in message
    assert " down for " in gone and "last success" in gone and "cannot connect" in gone, gone
    assert " down for " in frozen and "no success yet" in frozen and "health probes failed" in frozen, frozen
