"""The circuit breaker on its own (endpoints/breaker.py): failure streaks, the probe schedule, the half-open ramp."""

from __future__ import annotations

import pytest

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.breaker import Breaker
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.lifecycle import DEGRADED, DOWN, DRAINING, HEALTHY, RETIRED
from pipeline.endpoints.state import EndpointState

NOW = 100.0


def endpoint(capacity: int = 4, health_interval_s: float = 10.0, state: str = HEALTHY) -> EndpointState:
    cfg = ClientConfig(health_interval_s=health_interval_s)
    client = EndpointClient("http://a", gen=GenerationConfig(), client=cfg, concurrency=capacity)
    return EndpointState(client=client, capacity=capacity, state=state)


@pytest.mark.parametrize(
    ("outcomes", "opens"),
    [
        ("fff", [False, False, True]),
        ("ffsff", [False, False, None, False, False]),
        ("ffsfff", [False, False, None, False, False, True]),
        ("sffff", [None, False, False, True, True]),
    ],
    ids=["three-in-a-row", "a-success-ends-the-streak", "a-new-streak-of-three", "it-stays-open-past-the-threshold"],
)
def test_a_streak_of_failures_opens_the_circuit(outcomes: str, opens: list[bool | None]) -> None:
    breaker, ep = Breaker(failure_threshold=3), endpoint()
    seen: list[bool | None] = []
    for outcome in outcomes:
        if outcome == "f":
            seen.append(breaker.failed(ep))
        else:
            breaker.succeeded(ep)
            seen.append(None)
    assert seen == opens


@pytest.mark.parametrize(
    ("max_cooldown_s", "waits"),
    [(30.0, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]), (3.0, [1.0, 2.0, 3.0, 3.0])],
    ids=["doubles-up-to-the-max", "a-small-max"],
)
def test_each_failed_probe_doubles_the_cooldown(max_cooldown_s: float, waits: list[float]) -> None:
    breaker, ep = Breaker(max_cooldown_s=max_cooldown_s), endpoint(state=DOWN)
    for wait in waits:
        breaker.probe_failed(ep, NOW, max_wait_s=60.0)
        assert ep.down_until == NOW + wait


def test_a_failed_probe_is_retried_within_its_longest_wait() -> None:
    breaker, ep = Breaker(), endpoint(state=DOWN)
    ep.cooldown_s = 16.0
    breaker.probe_failed(ep, NOW, max_wait_s=2.0)
    assert (ep.down_until, ep.cooldown_s) == (NOW + 2.0, 30.0)


@pytest.mark.parametrize(
    ("health_interval_s", "cooldown_s", "first_probe_in"),
    [(10.0, 1.0, 1.0), (10.0, 8.0, 2.0), (1.0, 1.0, 0.2)],
    ids=["after-the-cooldown", "within-the-control-interval", "scaled-control-interval"],
)
def test_an_opened_circuit_is_probed_after_its_cooldown_within_the_control_interval(
    health_interval_s: float, cooldown_s: float, first_probe_in: float
) -> None:
    breaker, ep = Breaker(), endpoint(health_interval_s=health_interval_s)
    ep.cooldown_s, ep.ramp = cooldown_s, 2
    breaker.opened(ep, NOW)
    assert ep.down_until == pytest.approx(NOW + first_probe_in)
    assert ep.cooldown_s == cooldown_s * 2 and ep.ramp == 0


@pytest.mark.parametrize(
    ("capacity", "ramp", "limit"),
    [(1, 0, 1), (2, 1, 1), (4, 1, 1), (8, 2, 2), (64, 16, 16)],
    ids=lambda v: str(v),
)
def test_a_half_open_circuit_starts_with_a_few_slots(capacity: int, ramp: int, limit: int) -> None:
    breaker, ep = Breaker(failure_threshold=3), endpoint(capacity=capacity, state=DOWN)
    ep.down_until, ep.probe_failures = NOW + 5, 2
    breaker.half_opened(ep)
    assert (ep.ramp, ep.limit) == (ramp, limit)
    assert (ep.down_until, ep.probe_failures, ep.consecutive_failures) == (0.0, 0, 2)
    assert breaker.failed(ep)  # one more failure opens it again


def test_successes_ramp_a_half_open_endpoint_back_to_its_capacity() -> None:
    breaker, ep = Breaker(), endpoint(capacity=8)
    breaker.half_opened(ep)
    limits = []
    for _ in range(7):
        breaker.succeeded(ep)
        ep.ramp_up()
        limits.append(ep.limit)
    assert limits == [3, 4, 5, 6, 7, 8, 8] and ep.ramp == 0


def test_a_success_starts_the_cooldown_over() -> None:
    breaker, ep = Breaker(), endpoint()
    ep.cooldown_s, ep.consecutive_failures = 16.0, 2
    breaker.succeeded(ep)
    assert (ep.cooldown_s, ep.consecutive_failures) == (1.0, 0)


def test_an_endpoint_listed_again_is_probed_at_once() -> None:
    breaker, ep = Breaker(), endpoint(state=DOWN)
    ep.down_until, ep.cooldown_s = NOW + 20, 16.0
    breaker.probe_at_once(ep)
    assert breaker.due(ep, NOW) and ep.cooldown_s == 1.0


@pytest.mark.parametrize(
    ("state", "down_until", "due"),
    [(DOWN, NOW, True), (DOWN, NOW - 1, True), (DOWN, NOW + 0.1, False)]
    + [(state, 0.0, False) for state in (HEALTHY, DEGRADED, DRAINING, RETIRED)],
    ids=["down-due-now", "down-overdue", "down-not-yet", "healthy", "degraded", "draining", "retired"],
)
def test_only_an_open_circuit_whose_time_has_come_is_due(state: str, down_until: float, due: bool) -> None:
    ep = endpoint(state=state)
    ep.down_until = down_until
    assert Breaker().due(ep, NOW) is due
