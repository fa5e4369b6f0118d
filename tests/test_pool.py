import asyncio

import pytest

from pipeline.endpoints.pool import Pool
from pipeline.endpoints.state import DEGRADED, DOWN, HEALTHY, EndpointState
from pipeline.errors import EndpointError, RetryableRequestError
from tests.helpers.endpoint_states import endpoint


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


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

    with pytest.raises(
        EndpointError, match=r"no usable endpoint.*http://a down for .*last error .*: connection refused\)"
    ):
        asyncio.run(scenario())


def test_a_saturated_pool_waits_for_a_slot_past_the_no_endpoint_timeout() -> None:
    """Every slot busy on a healthy endpoint is the normal state of a run, not a dead pool."""

    async def scenario() -> EndpointState:
        ep = endpoint("http://a", 1)
        pool = Pool([ep], no_endpoint_timeout_s=0.05)
        await pool.acquire()

        async def free_later() -> None:
            await asyncio.sleep(0.3)  # six times the no-endpoint timeout
            await pool.release(ep, latency=0.3)

        task = asyncio.create_task(free_later())
        got = await pool.acquire()
        await task
        return got

    assert asyncio.run(scenario()).url == "http://a"


def test_retries_take_a_freed_slot_before_new_prompts() -> None:
    async def scenario() -> list[str]:
        ep = endpoint("http://a", 1)
        pool = Pool([ep])
        await pool.acquire()
        order: list[str] = []

        async def wait(name: str, retry: bool) -> None:
            await pool.acquire(retry=retry)
            order.append(name)
            await pool.release(ep, latency=0.01)

        new = asyncio.create_task(wait("new", retry=False))  # waiting first
        await asyncio.sleep(0.01)
        again = asyncio.create_task(wait("retry", retry=True))
        await asyncio.sleep(0.01)
        await pool.release(ep, latency=0.01)
        await asyncio.gather(new, again)
        return order

    assert asyncio.run(scenario()) == ["retry", "new"]


def test_only_time_without_any_usable_endpoint_counts_against_the_timeout() -> None:
    async def scenario() -> None:
        clock = Clock()
        a, b = endpoint("http://a", 1), endpoint("http://b", 1)
        pool = Pool([a, b], no_endpoint_timeout_s=10.0, clock=clock)
        pool.mark_down(a, "connection refused")
        clock.now += 60.0
        assert pool.unusable_for() == 0.0  # b is up (if busy): the pool is usable
        pool.mark_down(b, "connection refused")
        clock.now += 4.0
        assert pool.unusable_for() == 4.0
        pool.mark_up(a)
        assert pool.unusable_for() == 0.0

    asyncio.run(scenario())


def test_a_waiter_cancelled_while_handed_a_slot_gives_it_back() -> None:
    async def scenario() -> int:
        ep = endpoint("http://a", 1)
        pool = Pool([ep])
        await pool.acquire()
        waiter = asyncio.create_task(pool.acquire(retry=True))
        await asyncio.sleep(0.01)
        await pool.release(ep, latency=0.01)  # hands the slot to the waiter ...
        waiter.cancel()  # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return ep.inflight

    assert asyncio.run(scenario()) == 0


def test_failures_of_requests_in_flight_do_not_push_the_next_probe_away() -> None:
    """A server that dies with 64 requests in flight sees 64 failures; its probe schedule opens once."""

    async def scenario() -> None:
        clock = Clock()
        ep = endpoint("http://a", 64)
        pool = Pool([ep], clock=clock)
        for _ in range(64):
            await pool.acquire()
        for _ in range(64):
            pool.mark_down(ep, "connection lost mid-response")
            await pool.release(ep, error=RetryableRequestError("connection lost mid-response"))
        assert ep.state == DOWN and ep.down_until == clock.now + 1.0
        clock.now += 1.0
        pool.probe_failed(ep, "cannot connect", max_wait_s=0.5)  # probes stay frequent while it is away
        assert ep.down_until == clock.now + 0.5

    asyncio.run(scenario())


def test_an_endpoint_back_from_down_is_half_open_then_ramps_to_full_capacity() -> None:
    async def scenario() -> list[int]:
        ep = endpoint("http://a", 16)
        pool = Pool([ep])
        pool.mark_down(ep, "connection refused")
        pool.mark_up(ep)
        limits = [ep.limit]
        while ep.ramp:
            await pool.acquire()
            await pool.release(ep, latency=0.01)
            limits.append(ep.limit)
        return limits

    limits = asyncio.run(scenario())
    assert limits[0] == 4 and limits[-1] == 16 and limits == sorted(limits)


def test_describe_states_the_real_state_and_the_age_of_the_last_error() -> None:
    async def scenario() -> tuple[str, str]:
        clock = Clock()
        ep = endpoint("http://a", 2)
        pool = Pool([ep], clock=clock)
        pool.mark_down(ep, "/health failed: cannot connect")
        clock.now += 5.0
        pool.mark_up(ep)
        await pool.acquire()
        await pool.release(ep, latency=1.0)
        clock.now += 7.0
        recovered = pool.describe()
        pool.probe_missed(ep, "/health failed: request timed out", 2)  # frozen: accepts, never answers
        return recovered, pool.describe()

    recovered, frozen = asyncio.run(scenario())
    assert recovered.startswith("http://a healthy for 7s (") and "last success 7s ago" in recovered
    assert "last error 12s ago: /health failed: cannot connect" in recovered
    assert "not answering /health: 2 probes failed in a row" in frozen
    assert "last error 0s ago: /health failed: request timed out" in frozen
