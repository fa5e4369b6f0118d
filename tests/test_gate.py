"""Gate admission against real simulators over HTTP: preflight at start, late endpoints, re-verification on return.

Each test builds the pool the runner builds (EndpointClient + EndpointState per URL) and drives `Gate.admit_all`
and `Gate.verify`, the latter through `HealthMonitor.check`, the way a run does.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest

from pipeline.config import ClientConfig, Config, EndpointConfig, GenerationConfig
from pipeline.endpoints.autosize import capacity_of
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.health import HealthMonitor
from pipeline.endpoints.pool import Pool
from pipeline.endpoints.state import DOWN, HEALTHY, RETIRED, EndpointState
from pipeline.engine.gate import Gate
from pipeline.errors import PreflightError
from pipeline.sim import SimConfig, serve

MODEL = "Qwen3.6-27B"
EXPECT = {"reasoning_parser": "qwen3"}


def make_config(urls: list[str], concurrency: int = 4) -> Config:
    return Config(
        generation=GenerationConfig(model=MODEL, max_tokens=2048),
        client=ClientConfig(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, connect_timeout_s=2.0),
        endpoints=tuple(EndpointConfig(url=u, concurrency=concurrency) for u in urls),
        expect=dict(EXPECT),
    )


def sim_config(**knobs: Any) -> SimConfig:
    knobs.setdefault("reasoning_parser", "qwen3")
    return SimConfig(served_model_name=MODEL, mean_output_tokens=40, **knobs)


def free_port() -> int:
    """A port nothing listens on (yet): connections are refused, as while SGLang loads its weights."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def stats(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{url}/_sim/stats")).json()


@asynccontextmanager
async def gated(cfg: Config) -> AsyncIterator[tuple[Gate, Pool]]:
    """The pool and gate a run builds for `cfg.endpoints`."""
    async with AsyncExitStack() as stack:
        states = []
        for ep in cfg.endpoints:
            client = EndpointClient(ep.url, gen=cfg.generation, client=cfg.client, concurrency=ep.concurrency)
            await stack.enter_async_context(client)
            capacity, auto = capacity_of(ep)
            states.append(EndpointState(client=client, capacity=capacity, auto_capacity=auto))
        pool = Pool(states, no_endpoint_timeout_s=1.0)
        yield Gate(cfg, pool), pool


def test_endpoints_configured_as_expected_are_admitted_and_recorded() -> None:
    async def scenario() -> None:
        async with serve(sim_config()) as a, serve(sim_config(seed=1)) as b:
            async with gated(make_config([a, b])) as (gate, pool):
                record = await gate.admit_all()
                assert record["skipped"] is False
                assert [(r["url"], r["ok"], r["reachable"]) for r in record["endpoints"]] == [
                    (a, True, True),
                    (b, True, True),
                ]
                assert gate.pending == set() and [ep.state for ep in pool.endpoints] == [HEALTHY, HEALTHY]
                assert set(gate.fingerprints) == {a, b}  # what a restart will be compared with
                for url in (a, b):  # preflight probes only: no prompt generation
                    s = await stats(url)
                    assert s["probes"]["requests"] >= 1 and s["generations_total"] == 0

    asyncio.run(scenario())


def test_one_endpoint_configured_differently_stops_the_run_before_any_prompt() -> None:
    async def scenario() -> None:
        async with serve(sim_config()) as good, serve(sim_config(reasoning_parser="deepseek-r1")) as drifted:
            async with gated(make_config([good, drifted])) as (gate, _):
                with pytest.raises(PreflightError) as caught:
                    await gate.admit_all()
                assert caught.value.exit_code == 3
                message = str(caught.value)
                assert drifted in message and "reasoning_parser" in message and "no prompt was sent" in message
                assert good not in message  # only the drifted endpoint is reported
                assert (await stats(good))["generations_total"] == (await stats(drifted))["generations_total"] == 0

    asyncio.run(scenario())


def test_an_unreachable_endpoint_starts_down_and_joins_once_it_answers_and_passes_preflight() -> None:
    port = free_port()
    late_url = f"http://127.0.0.1:{port}"

    async def scenario() -> None:
        async with serve(sim_config()) as up:
            cfg = make_config([up, late_url], concurrency=0)  # automatic: capacity from what the server says
            async with gated(cfg) as (gate, pool):
                live, late = pool.endpoints
                record = await gate.admit_all()  # not fatal: the run starts on the live endpoint
                assert [r["reachable"] for r in record["endpoints"]] == [True, False]
                assert gate.pending == {late_url} and late.state == DOWN and live.state == HEALTHY
                assert await gate.verify(late) == "still unreachable"

                events: list[str] = []
                monitor = HealthMonitor(pool, verify=gate.verify, on_event=events.append)
                async with serve(sim_config(port=port, max_running_requests=8)):
                    await monitor.check(late)
                    assert late.state not in (DOWN, RETIRED) and gate.pending == set()
                    assert any(e.startswith(f"{late_url}: healthy") for e in events)
                    assert late_url in gate.fingerprints and gate.results[late_url].ok
                    assert late.capacity >= 8 and "8" in late.capacity_source  # sized from the server it met
                    assert await pool.acquire() in (live, late)

    asyncio.run(scenario())


def test_a_late_endpoint_that_comes_up_configured_differently_is_retired() -> None:
    port = free_port()
    late_url = f"http://127.0.0.1:{port}"

    async def scenario() -> None:
        async with serve(sim_config()) as up:
            async with gated(make_config([up, late_url])) as (gate, pool):
                _, late = pool.endpoints
                await gate.admit_all()
                events: list[str] = []
                monitor = HealthMonitor(pool, verify=gate.verify, on_event=events.append)
                async with serve(sim_config(port=port, reasoning_parser="deepseek-r1")) as url:
                    await monitor.check(late)
                    assert late.state == RETIRED and "failed preflight" in late.last_error
                    assert any("removed from the pool" in e and "reasoning_parser" in e for e in events)
                    assert (await stats(url))["generations_total"] == 0

    asyncio.run(scenario())


def test_an_endpoint_restarted_with_other_args_is_refused_and_with_the_same_args_is_not() -> None:
    port = free_port()

    async def scenario() -> None:
        url = f"http://127.0.0.1:{port}"
        async with gated(make_config([url])) as (gate, pool):  # the run's clients live across the restarts
            [ep] = pool.endpoints
            async with serve(sim_config(port=port, context_length=32768)):
                await gate.admit_all()
                assert await gate.verify(ep) is None  # same server, same configuration
            async with serve(sim_config(port=port, context_length=32768, seed=3)):
                assert await gate.verify(ep) is None  # restarted as it was: still welcome
            async with serve(sim_config(port=port, context_length=8192)):
                why = await gate.verify(ep)
                assert why is not None and why.startswith("restarted with a different configuration")
                assert "context_length" in why and "32768" in why and "8192" in why

    asyncio.run(scenario())


def test_skip_preflight_admits_everything_without_a_request() -> None:
    async def scenario() -> None:
        async with serve(sim_config(reasoning_parser="deepseek-r1")) as drifted:
            cfg = make_config([drifted])
            async with gated(cfg) as (_, pool):
                gate = Gate(cfg, pool, skip=True)
                assert await gate.admit_all() == {"skipped": True}
                assert await gate.verify(pool.endpoints[0]) is None
                assert (await stats(drifted))["requests"] == 0

    asyncio.run(scenario())


def test_an_admitted_endpoint_splits_reasoning_as_its_sglang_release_would() -> None:
    """Issue 19: without a reasoning parser regen splits raw text itself, following the qwen3 parser of the
    server's release; the release is the one preflight read from /server_info."""

    async def scenario() -> None:
        async with serve(sim_config(version="0.5.9")) as old, serve(sim_config()) as new:
            async with gated(make_config([old, new])) as (gate, pool):
                await gate.admit_all()
                assert [ep.client.server_version for ep in pool.endpoints] == ["0.5.9", "0.5.23"]

    asyncio.run(scenario())
