"""Conversation-sticky slots: `Pool.acquire(prefer=url)` takes the preferred endpoint while it is live, waits a
bounded time for a slot there, and falls back to the least-loaded choice when the wait runs out or it goes down."""

import asyncio

from pipeline.endpoints.pool import Pool
from pipeline.endpoints.state import DOWN, EndpointState
from tests.helpers.endpoint_states import endpoint


def _pool(*eps: EndpointState, wait: float = 5.0) -> Pool:
    return Pool(list(eps), prefer_wait_s=wait)


def test_the_preferred_endpoint_wins_over_a_less_loaded_one() -> None:
    async def scenario() -> None:
        a, b = endpoint("http://a", 4), endpoint("http://b", 4)
        pool = _pool(a, b)
        assert await pool.acquire() is a
        assert await pool.acquire(prefer="http://a") is a  # b is idle, but a holds the conversation's history
        assert await pool.acquire(prefer="http://unknown") is b  # not in the pool: least loaded

    asyncio.run(scenario())


def test_a_full_preferred_endpoint_is_waited_for_ahead_of_new_prompts() -> None:
    async def scenario() -> None:
        a, b = endpoint("http://a", 1), endpoint("http://b", 1)
        pool = _pool(a, b)
        await pool.acquire()  # a is full
        await pool.acquire()  # b is full
        pinned = asyncio.create_task(pool.acquire(prefer="http://a"))
        new = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0.01)
        await pool.release(a, latency=0.1)  # a's slot goes to the turn that can use only a
        assert await pinned is a
        assert not new.done()
        await pool.release(b, latency=0.1)
        assert await new is b

    asyncio.run(scenario())


def test_the_wait_is_bounded_then_any_endpoint_will_do() -> None:
    async def scenario() -> float:
        a, b = endpoint("http://a", 1), endpoint("http://b", 1)
        pool = _pool(a, b, wait=0.05)
        await pool.acquire()  # a is full, b free
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await pool.acquire(prefer="http://a") is b
        assert not pool._pinned["http://a"]  # the waiter left no trace
        return loop.time() - start

    assert 0.04 <= asyncio.run(scenario()) < 1.0


def test_zero_wait_sticks_only_when_a_slot_is_free_now() -> None:
    async def scenario() -> None:
        a, b = endpoint("http://a", 1), endpoint("http://b", 2)
        pool = _pool(a, b, wait=0)
        assert await pool.acquire(prefer="http://a") is a
        assert await pool.acquire(prefer="http://a") is b

    asyncio.run(scenario())


def test_a_down_endpoint_hands_its_conversations_on_at_once() -> None:
    async def scenario() -> None:
        a, b = endpoint("http://a", 2), endpoint("http://b", 2)
        pool = _pool(a, b, wait=30)
        pool.mark_down(a, "refused")
        assert a.state == DOWN
        assert await asyncio.wait_for(pool.acquire(prefer="http://a"), 1) is b

    asyncio.run(scenario())


def test_waiters_fall_back_when_their_endpoint_goes_down_while_they_wait() -> None:
    async def scenario() -> None:
        a, b = endpoint("http://a", 1), endpoint("http://b", 2)
        pool = _pool(a, b, wait=30)
        await pool.acquire(prefer="http://a")  # a is full
        waiter = asyncio.create_task(pool.acquire(prefer="http://a"))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        pool.mark_down(a, "connection reset")
        assert await asyncio.wait_for(waiter, 1) is b  # long before the 30 s preference runs out

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaks_no_slot() -> None:
    async def scenario() -> None:
        a = endpoint("http://a", 1)
        pool = _pool(a)
        await pool.acquire()
        waiter = asyncio.create_task(pool.acquire(prefer="http://a"))
        await asyncio.sleep(0.01)
        await pool.release(a, latency=0.1)  # handed to the waiter ...
        waiter.cancel()  # ... which is cancelled before it runs again
        await asyncio.gather(waiter, return_exceptions=True)
        assert a.inflight == 0
        assert await asyncio.wait_for(pool.acquire(prefer="http://a"), 1) is a

    asyncio.run(scenario())
