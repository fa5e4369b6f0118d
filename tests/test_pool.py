import asyncio

import pytest

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.pool import DEGRADED, DOWN, HEALTHY, EndpointState, Pool
from pipeline.errors import EndpointError, RetryableRequestError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def endpoint(url: str, capacity: int) -> EndpointState:
    client = EndpointClient(url, gen=GenerationConfig(), client=ClientConfig(), concurrency=capacity)
    return EndpointState(client=client, capacity=capacity)


def test_least_outstanding_relative_to_capacity() -> None:
    async def scenario() -> list[str]:
        pool = Pool([endpoint("http://a", 4), endpoint("http://b", 1)])
        return [(await pool.acquire()).url for _ in range(5)]

    picks = asyncio.run(scenario())
    assert sorted(picks) == ["http://a"] * 4 + ["http://b"]
    assert picks[0] == "http://a"  # ties go to the first; then b (0/1) beats a (1/4)
    assert picks[1] == "http://b"


def test_circuit_opens_after_consecutive_failures_and_half_opens() -> None:
    async def scenario() -> None:
        clock = Clock()
        ep = endpoint("http://a", 2)
        pool = Pool([ep], failure_threshold=3, clock=clock)
        err = RetryableRequestError("boom")
        for expected in (DEGRADED, DEGRADED, DOWN):
            await pool.acquire()
            await pool.release(ep, error=err)
            assert ep.state == expected
        assert pool.due_for_probe() == []  # cooldown not over
        clock.now += 1.5
        assert pool.due_for_probe() == [ep]
        pool.mark_up(ep)
        assert ep.state == DEGRADED
        await pool.acquire()
        await pool.release(ep, latency=0.1)
        assert ep.state == HEALTHY and ep.consecutive_failures == 0

    asyncio.run(scenario())


def test_acquire_waits_for_a_free_slot() -> None:
    async def scenario() -> float:
        ep = endpoint("http://a", 1)
        pool = Pool([ep])
        await pool.acquire()
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def free_later() -> None:
            await asyncio.sleep(0.05)
            await pool.release(ep, latency=0.05)

        task = asyncio.create_task(free_later())
        got = await pool.acquire()
        await task
        assert got is ep
        return loop.time() - start

    assert asyncio.run(scenario()) >= 0.04


def test_no_usable_endpoint_times_out_with_a_clear_error() -> None:
    async def scenario() -> None:
        ep = endpoint("http://a", 1)
        pool = Pool([ep], no_endpoint_timeout_s=0.05)
        pool.mark_down(ep, "connection refused")
        await pool.acquire()

    with pytest.raises(EndpointError, match=r"no usable endpoint.*http://a down \(connection refused\)"):
        asyncio.run(scenario())
