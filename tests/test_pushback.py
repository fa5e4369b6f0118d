"""A server that refuses for load (HTTP 503 queue full, a router's 429/408) is live and full, not down: the pool
holds its admissions back and probes it (endpoints/retry.py Pushback, endpoints/pool.py), on a fake clock; and
endpoints/pushback.py on its own, on one endpoint, with the clock's readings passed in."""

import asyncio
import logging

import pytest

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints import pushback
from pipeline.endpoints.autosize import Autosizer
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.health import HealthMonitor
from pipeline.endpoints.pool import Pool
from pipeline.endpoints.retry import PushbackPolicy, control_interval_s
from pipeline.endpoints.state import DEGRADED, DOWN, DRAINING, HEALTHY, RETIRED, EndpointState
from pipeline.errors import RetryableRequestError

QUEUE_FULL = RetryableRequestError("http://a: HTTP 503: The request queue is full.", status=503)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def endpoint(url: str, capacity: int, client: ClientConfig | None = None, auto: bool = False) -> EndpointState:
    cfg = client or ClientConfig(backoff_base_s=0.5, backoff_max_s=30.0, health_interval_s=10.0)
    ep = EndpointClient(url, gen=GenerationConfig(), client=cfg, concurrency=capacity)
    return EndpointState(client=ep, capacity=capacity, auto_capacity=auto)


async def fill(pool: Pool, n: int) -> None:
    for _ in range(n):
        await pool.acquire()


def admits_now(pool: Pool) -> bool:
    return pool._take_now(retry=False) is not None


@pytest.mark.parametrize(
    ("health_interval_s", "expected"),
    [(10.0, 2.0), (60.0, 2.0), (1.0, 0.2), (0.4, 0.08)],
    ids=["default", "longer-health-interval-keeps-2s", "soak-scaled", "test-scaled"],
)
def test_the_control_interval_scales_with_the_health_interval(health_interval_s: float, expected: float) -> None:
    assert control_interval_s(health_interval_s) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("level", "retry_after", "expected"),
    [(1, None, 0.0), (2, None, 0.5), (3, None, 1.0), (4, None, 2.0), (9, None, 2.0), (1, 7.0, 7.0), (3, 99.0, 30.0)],
    ids=["first-probes-at-once", "base", "doubles", "capped", "stays-capped", "retry-after-floor", "retry-after-cap"],
)
def test_hold_grows_with_refused_probes(level: int, retry_after: float | None, expected: float) -> None:
    policy = PushbackPolicy.for_client(ClientConfig(backoff_base_s=0.5, backoff_max_s=30.0, health_interval_s=10.0))
    assert policy.hold_for(level, retry_after) == expected


def test_holds_are_scaled_with_the_client_timeouts() -> None:
    soak = PushbackPolicy.for_client(ClientConfig(backoff_base_s=0.05, backoff_max_s=3.0, health_interval_s=1.0))
    assert (soak.base_s, soak.max_s, soak.calm_s) == (0.05, pytest.approx(0.2), 0.05)


def test_refusals_never_mark_an_endpoint_down_and_its_probes_are_held_back() -> None:
    async def scenario() -> None:
        clock = Clock()
        ep = endpoint("http://a", 4)
        pool = Pool([ep], failure_threshold=3, clock=clock)
        await fill(pool, 4)
        await pool.release(ep, error=QUEUE_FULL)  # the first refusal: one probe at once
        assert ep.pushback.level == 1 and ep.pushback.ceiling == 3
        await pool.release(ep, error=QUEUE_FULL)  # admitted before it: tells nothing new
        assert ep.pushback.level == 1 and ep.inflight == 2
        assert admits_now(pool)  # the probe
        assert not admits_now(pool)  # one probe, not the free slot
        for level in (2, 3, 4, 5, 6):  # each refused probe: a longer hold, then one probe again
            await pool.release(ep, error=QUEUE_FULL)
            assert ep.pushback.level == level and not admits_now(pool)
            clock.now += ep.pushback.policy.hold_for(level)
            assert admits_now(pool)
        assert ep.state == HEALTHY and ep.consecutive_failures == 0 and ep.pushbacks == 7
        clock.now += ep.pushback.policy.calm_s  # the last probe went unrefused: it takes requests again, ...
        await pool.release(ep, latency=1.0)
        assert not ep.pushback.active and ep.inflight == 2
        assert admits_now(pool) and not admits_now(pool)  # ... as many as it held when the refusals began (3)
        await pool.release(ep, latency=1.0)
        assert ep.limit == 4  # then one more per success, up to its capacity

    asyncio.run(scenario())


def test_a_retry_after_is_the_least_hold() -> None:
    async def scenario() -> None:
        clock = Clock()
        ep = endpoint("http://a", 2)
        pool = Pool([ep], clock=clock)
        await fill(pool, 1)
        await pool.release(ep, error=RetryableRequestError("429", status=429, retry_after=4.0))
        clock.now += 3.9
        assert not admits_now(pool)
        clock.now += 0.1
        assert admits_now(pool)

    asyncio.run(scenario())


def test_other_server_errors_still_open_the_circuit() -> None:
    async def scenario() -> None:
        ep = endpoint("http://a", 4)
        pool = Pool([ep], failure_threshold=3)
        await fill(pool, 3)
        for _ in range(3):
            await pool.release(ep, error=RetryableRequestError("HTTP 500", status=500))
        assert ep.state == DOWN and not ep.pushback.active

    asyncio.run(scenario())


def test_a_probe_goes_to_a_new_prompt_rather_than_a_retry() -> None:
    async def scenario() -> None:
        clock = Clock()
        full, busy = endpoint("http://full", 1), endpoint("http://busy", 2)
        pool = Pool([full, busy], clock=clock)
        await fill(pool, 3)
        await pool.release(busy, error=QUEUE_FULL)
        assert admits_now(pool)  # busy's probe ...
        await pool.release(busy, error=QUEUE_FULL)  # ... refused: held
        retry = asyncio.create_task(pool.acquire(retry=True))
        new = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        clock.now += busy.pushback.policy.hold_for(2)
        await pool.notify()  # the hold is over: the probe is due
        assert (await asyncio.wait_for(new, 1.0)) is busy
        assert not retry.done()  # a retry has spent an attempt: it waits for a slot that is not a probe
        await pool.release(full, latency=1.0)
        assert (await retry) is full

    asyncio.run(scenario())


def test_a_retry_takes_the_probe_when_no_new_prompt_waits() -> None:
    async def scenario() -> None:
        ep = endpoint("http://a", 2)
        pool = Pool([ep], clock=Clock())
        await fill(pool, 2)
        await pool.release(ep, error=QUEUE_FULL)
        assert (await asyncio.wait_for(pool.acquire(retry=True), 1.0)) is ep  # the tail of a run is not stuck

    asyncio.run(scenario())


def test_an_automatic_endpoint_is_lowered_to_what_the_server_took_and_not_grown_at_once() -> None:
    async def scenario() -> None:
        clock = Clock()
        ep = endpoint("http://a", 18, auto=True)
        pool = Pool([ep], clock=clock)
        await fill(pool, 18)
        await pool.release(ep, error=QUEUE_FULL)  # one refusal: probe at once, nothing lowered yet
        assert ep.capacity == 18
        assert admits_now(pool)
        await pool.release(ep, error=QUEUE_FULL)  # the probe refused too: it is full at 17
        assert ep.capacity == 17 and ep.capacity_source.startswith("lowered")
        sizer = Autosizer(pool)
        assert sizer.interval_s == 2.0 and pool.pushed_back_within(ep, sizer.interval_s)
        clock.now += sizer.interval_s
        assert not pool.pushed_back_within(ep, sizer.interval_s)

    asyncio.run(scenario())


def test_control_loops_follow_the_scaled_health_interval() -> None:
    async def scenario() -> None:
        clock = Clock()
        scaled = ClientConfig(backoff_base_s=0.05, backoff_max_s=3.0, health_interval_s=1.0)
        ep = endpoint("http://a", 4, client=scaled)
        pool = Pool([ep], clock=clock)
        assert Autosizer(pool).interval_s == pytest.approx(0.2)
        assert HealthMonitor(pool, interval_s=scaled.health_interval_s).down_probe_s == pytest.approx(0.2)
        pool.mark_down(ep, "cannot connect")
        assert ep.down_until == pytest.approx(clock.now + 0.2)  # first probe within the control interval, not 1 s

    asyncio.run(scenario())


# -- endpoints/pushback.py on its own: one endpoint, no pool, times passed in ---------------------------------------
BASE = 0.5  # the endpoint() policy: holds of 0.5, 1, 2, 2 ... s; a probe unrefused for 0.5 s ends the push-back
T0 = 100.0


def full(capacity: int = 4, inflight: int = 4, auto: bool = False, state: str = HEALTHY) -> EndpointState:
    ep = endpoint("http://a", capacity, auto=auto)
    ep.inflight, ep.state = inflight, state
    return ep


def test_the_first_refusal_holds_nothing_and_lets_one_probe_through() -> None:
    ep = full()
    ep.inflight -= 1  # the refused request came back
    assert pushback.refused(ep, QUEUE_FULL, T0) is None
    assert (ep.pushback.level, ep.pushback.ceiling, ep.pushbacks, ep.errors) == (1, 3, 1, 1)
    assert ep.last_error == str(QUEUE_FULL) and ep.pushed_back_at is None and ep.capacity == 4
    assert pushback.admits(ep, T0, probe=True)  # the probe, at once ...
    assert not pushback.admits(ep, T0, probe=False)  # ... but only to a request that may be it
    assert pushback.admitted(ep, T0) == BASE  # calm once it is unrefused this long
    ep.inflight += 1
    assert not pushback.admits(ep, T0, probe=True)  # one probe


@pytest.mark.parametrize(
    ("auto", "capacity_after", "source"),
    [(False, 4, "config"), (True, 3, "lowered: the server refused more")],
    ids=["configured-capacity-kept", "automatic-capacity-lowered"],
)
def test_a_refused_probe_holds_admissions_and_lowers_an_automatic_capacity(
    auto: bool, capacity_after: int, source: str
) -> None:
    ep = full(auto=auto, inflight=3)
    pushback.refused(ep, QUEUE_FULL, T0)
    pushback.admitted(ep, T0)
    assert pushback.refused(ep, QUEUE_FULL, T0 + 0.01) == BASE  # the probe refused: hold
    assert (ep.capacity, ep.capacity_source, ep.pushed_back_at) == (capacity_after, source, T0 + 0.01)
    ep.inflight -= 1
    assert not pushback.admits(ep, T0 + 0.01 + BASE - 0.001, probe=True)
    assert pushback.admits(ep, T0 + 0.01 + BASE, probe=True)


def test_refusals_of_requests_sent_before_the_hold_change_nothing() -> None:
    ep = full()
    pushback.refused(ep, QUEUE_FULL, T0)
    for later in (0.01, 0.02, 0.03):  # no probe admitted since: these were on their way already
        assert pushback.refused(ep, QUEUE_FULL, T0 + later) is None
    assert (ep.pushback.level, ep.pushback.refusals, ep.pushbacks) == (1, 4, 4)


@pytest.mark.parametrize(
    ("retry_after", "hold"),
    [(None, 0.0), (4.0, 4.0), (99.0, 30.0)],
    ids=["none-probe-at-once", "retry-after-is-the-hold", "retry-after-capped"],
)
def test_a_retry_after_holds_from_the_first_refusal(retry_after: float | None, hold: float) -> None:
    ep = full()
    error = RetryableRequestError("429", status=429, retry_after=retry_after)
    assert (pushback.refused(ep, error, T0) or 0.0) == hold
    assert pushback.refused_within(ep, T0, 1.0) is (hold > 0)


@pytest.mark.parametrize("state", [DOWN, DRAINING, RETIRED], ids=str)
def test_a_refusal_from_an_endpoint_not_live_is_only_counted(state: str) -> None:
    ep = full(state=state)
    assert pushback.refused(ep, QUEUE_FULL, T0) is None
    assert (ep.pushbacks, ep.errors, ep.pushback.active, ep.last_error) == (1, 1, False, "")


@pytest.mark.parametrize("state", [HEALTHY, DEGRADED], ids=str)
def test_a_live_endpoint_pushes_back_whatever_its_health(state: str) -> None:
    ep = full(state=state)
    pushback.refused(ep, QUEUE_FULL, T0)
    assert ep.pushback.active and ep.state == state and ep.consecutive_failures == 0


def test_an_unrefused_probe_ends_it_and_restores_what_the_server_held(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="regen.endpoints")
    ep = full(capacity=8, inflight=6)
    pushback.refused(ep, QUEUE_FULL, T0)  # ceiling 6
    pushback.admitted(ep, T0)
    pushback.refused(ep, QUEUE_FULL, T0 + 0.1)  # held 0.5 s
    pushback.admitted(ep, T0 + 0.6)
    ep.inflight = 2
    assert not pushback.calm(ep, T0 + 0.6 + BASE - 0.001)
    assert pushback.calm(ep, T0 + 0.6 + BASE)
    assert not ep.pushback.active and (ep.ramp, ep.limit) == (6, 6)
    ep.ramp_up()
    ep.ramp_up()
    assert (ep.ramp, ep.limit) == (0, 8)  # one more per success, then its capacity
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events == ["endpoint_pushback", "endpoint_pushback_over"]
    assert "after 1.1s of push-back (2 refused)" in caplog.records[-1].getMessage()


def test_admits_ends_a_calm_episode_first() -> None:
    ep = full(inflight=2)
    pushback.refused(ep, QUEUE_FULL, T0)  # held 2
    pushback.admitted(ep, T0)
    ep.inflight = 1
    assert not pushback.admits(ep, T0 + BASE - 0.001, probe=False)  # only the probe until then
    assert pushback.admits(ep, T0 + BASE, probe=False)  # calm: an ordinary admission again, ...
    assert not ep.pushback.active and ep.limit == 2  # ... up to the level it held


@pytest.mark.parametrize(
    ("pushed_back_at", "now", "within"),
    [(None, T0, False), (T0, T0 + 1.9, True), (T0, T0 + 2.0, False)],
    ids=["never", "within", "just-over"],
)
def test_refused_within(pushed_back_at: float | None, now: float, within: bool) -> None:
    ep = full()
    ep.pushed_back_at = pushed_back_at
    assert pushback.refused_within(ep, now, 2.0) is within
