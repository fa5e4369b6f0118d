"""The endpoint life cycle, as a table: every (state, event) pair, and the pool following it."""

from __future__ import annotations

import itertools

import pytest

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.lifecycle import DEGRADED, DOWN, DRAINING, HEALTHY, RETIRED, STATES, Event, next_state
from pipeline.endpoints.pool import Pool
from pipeline.endpoints.state import EndpointState

E = Event
EXPECTED = {  # state -> {event: next state}; an event not listed changes nothing
    HEALTHY: {E.FAILED: DEGRADED, E.WENT_DOWN: DOWN, E.RETIRED: RETIRED, E.DRAINED: DRAINING},
    DEGRADED: {E.SUCCEEDED: HEALTHY, E.FAILED: DEGRADED, E.WENT_DOWN: DOWN, E.RETIRED: RETIRED, E.DRAINED: DRAINING},
    DOWN: {E.PROBE_PASSED: DEGRADED, E.RETIRED: RETIRED, E.DRAINED: DRAINING},
    DRAINING: {E.LISTED_AGAIN: DOWN, E.RETIRED: RETIRED},
    RETIRED: {E.RETIRED: RETIRED, E.DRAINED: DRAINING},
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(STATES, Event)), ids=lambda v: str(v))
def test_every_state_and_event(state: str, event: Event) -> None:
    assert next_state(state, event) == EXPECTED[state].get(event)


def _pool_with(state: str) -> tuple[Pool, EndpointState]:
    client = EndpointClient("http://a", gen=GenerationConfig(), client=ClientConfig(), concurrency=4)
    ep = EndpointState(client=client, capacity=4, state=state)
    return Pool([ep], failure_threshold=2), ep


@pytest.mark.parametrize("state", STATES)
def test_the_pool_moves_endpoints_as_the_table_says(state: str) -> None:
    """Each pool call is one event: what the table refuses leaves the endpoint (and its last error) as it was."""
    calls = {
        E.WENT_DOWN: lambda pool, ep: pool.mark_down(ep, "refused"),
        E.PROBE_PASSED: lambda pool, ep: pool.mark_up(ep),
        E.RETIRED: lambda pool, ep: pool.retire(ep, "other args"),
        E.DRAINED: lambda pool, ep: pool.drain(ep),
        E.LISTED_AGAIN: lambda pool, ep: pool.undrain(ep),
        E.SUCCEEDED: lambda pool, ep: pool._succeeded(ep, 0.1),
        E.FAILED: lambda pool, ep: pool._failed(ep, "HTTP 500"),
    }
    for event, call in calls.items():
        pool, ep = _pool_with(state)
        call(pool, ep)
        assert ep.state == EXPECTED[state].get(event, state), event
        if event in (E.WENT_DOWN, E.FAILED) and event not in EXPECTED[state]:
            assert ep.last_error == ""  # a down or retired endpoint keeps the reason it went
