"""endpoints/fleet.py: the run's endpoints opened from the config, the embedded simulator handed in (never imported),
and the endpoints file's changes applied to the pool (new URLs join, removed ones drain, returning ones are probed).
Nothing here sends a request: opening an endpoint does not connect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from pipeline.config import EndpointConfig, config_from_dict
from pipeline.endpoints.fleet import Fleet
from pipeline.endpoints.state import DOWN, DRAINING, HEALTHY
from pipeline.errors import ConfigError

SIM_AT = "http://127.0.0.1:9"  # where the fake simulator says it listens; nothing is sent there


def _cfg(*endpoints: dict[str, Any]) -> Any:
    return config_from_dict({"endpoints": list(endpoints)})


def test_a_sim_endpoint_is_served_by_the_simulator_it_is_handed() -> None:
    started: list[Sequence[str]] = []

    @asynccontextmanager
    async def simulator(sim_args: Sequence[str]) -> AsyncIterator[str]:
        started.append(sim_args)
        yield SIM_AT

    async def scenario() -> tuple[list[str], dict[str, str]]:
        fleet = Fleet(_cfg({"url": "sim", "sim_args": ["--max-running-requests", "8"]}), simulator=simulator)
        async with fleet.opened() as pool:
            return [ep.url for ep in pool.endpoints], fleet.simulated

    urls, simulated = asyncio.run(scenario())
    assert urls == [SIM_AT] and simulated == {SIM_AT: "sim"}  # run.json lists it as "sim", not its port
    assert started == [("--max-running-requests", "8")]


def test_a_sim_endpoint_without_a_simulator_is_a_config_error() -> None:
    async def scenario() -> None:
        async with Fleet(_cfg({"url": "sim"})).opened():
            pass

    with pytest.raises(ConfigError, match='url = "sim"'):
        asyncio.run(scenario())


def test_the_endpoints_file_changes_drain_probe_and_add() -> None:
    events: list[str] = []

    async def scenario() -> dict[str, str]:
        fleet = Fleet(_cfg({"url": "http://a:30000"}, {"url": "http://b:30000"}), on_event=events.append)
        async with fleet.opened() as pool:
            a = EndpointConfig(url="http://a:30000")
            await fleet.apply({"http://a:30000": a})  # b is no longer listed
            assert {ep.url: ep.state for ep in pool.endpoints} == {
                "http://a:30000": HEALTHY,
                "http://b:30000": DRAINING,
            }
            b, c = EndpointConfig(url="http://b:30000"), EndpointConfig(url="http://c:30000", concurrency=0)
            await fleet.apply({"http://a:30000": a, "http://b:30000": b, "http://c:30000": c})
            added = pool.endpoints[-1]
            assert (added.url, added.auto_capacity, added.capacity_source) == ("http://c:30000", True, "automatic")
            return {ep.url: ep.state for ep in pool.endpoints}

    states = asyncio.run(scenario())
    assert states == {"http://a:30000": HEALTHY, "http://b:30000": DOWN, "http://c:30000": HEALTHY}  # b: probe first
    assert events == ["http://b:30000: removed from the endpoints file, draining"]
