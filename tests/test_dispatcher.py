"""The dispatcher through its seams: real simulators over HTTP, an in-memory Sink, an injected sleep, a RetryPolicy.

What is pinned here is `client.max_attempts` as DESIGN section 4 states it: failures that may be the prompt's
(a 5xx, a timeout, a rejected completion) use up attempts; a request lost because its endpoint went down (refused,
reset, or cancelled because the pool declared the endpoint dead) does not, and `client.max_endpoint_failures`
stops a prompt that takes every server it touches down with it.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from pipeline.config import ClientConfig, Config, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.pool import Pool
from pipeline.endpoints.retry import RetryPolicy
from pipeline.endpoints.state import DOWN, HEALTHY, RETIRED, EndpointState
from pipeline.engine.dispatcher import Dispatcher
from pipeline.engine.metrics import Metrics
from pipeline.errors import FatalEndpointError
from pipeline.records import Prompt
from pipeline.sim import SimConfig, prompt_key, serve
from pipeline.sim.faults import FaultPlan
from tests.helpers.memory_sink import MemorySink

MODEL = "Qwen3.6-27B"


class Sleeps:
    """An injected sleep that records the backoff it was asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def sim_config(**faults: Any) -> SimConfig:
    return SimConfig(served_model_name=MODEL, reasoning_parser="qwen3", mean_output_tokens=40, **faults)


def make_config(**client: Any) -> Config:
    client.setdefault("request_timeout_s", 10.0)
    return Config(generation=GenerationConfig(model=MODEL, max_tokens=2048), client=ClientConfig(**client))


def prompt(i: int) -> Prompt:
    return Prompt(id=f"p{i}", messages=({"role": "user", "content": f"Question {i}: what is {i} squared?"},))


def prompt_with_faults(plan: FaultPlan, wanted: list[str | None]) -> Prompt:
    """A prompt whose first requests meet exactly the faults `wanted` (the simulator draws them deterministically)."""
    for i in range(10_000):
        p = prompt(i)
        key = prompt_key(list(p.messages))
        if [plan.draw(key, attempt) for attempt in range(len(wanted))] == wanted:
            return p
    raise AssertionError(f"no prompt meets {wanted}")


def closed_port_url() -> str:
    """A URL on which nothing listens: connections are refused, as on a node that went away."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@asynccontextmanager
async def endpoints(cfg: Config, *targets: SimConfig | str, capacity: int = 4) -> AsyncIterator[Pool]:
    """A Pool over real endpoints: each target is a simulator to serve in-process, or a URL as it is."""
    async with AsyncExitStack() as stack:
        states = []
        for target in targets:
            url = target if isinstance(target, str) else await stack.enter_async_context(serve(target))
            client = EndpointClient(url, gen=cfg.generation, client=cfg.client, concurrency=capacity)
            await stack.enter_async_context(client)
            states.append(EndpointState(client=client, capacity=capacity))
        yield Pool(states, no_endpoint_timeout_s=5.0)


async def sim_stats(ep: EndpointState) -> dict[str, Any]:
    stats = await ep.client.get_json("/_sim/stats")
    assert isinstance(stats, dict)
    return stats


async def until(predicate: Callable[[], Awaitable[bool]]) -> None:
    """Poll every 10 ms, for at most 5 s, until `predicate` holds."""
    for _ in range(500):
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within 5 s")


def dispatcher(cfg: Config, pool: Pool, **seams: Any) -> tuple[Dispatcher, MemorySink, Metrics]:
    sink, metrics = MemorySink(), Metrics()
    seams.setdefault("sleep", Sleeps())
    return Dispatcher(cfg, pool, sink, metrics, **seams), sink, metrics


def test_a_clean_completion_is_accepted_on_the_first_attempt() -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=4)
        async with endpoints(cfg, sim_config()) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            await d.process(prompt(1))
            assert [r["id"] for r in sink.accepted] == ["p1"] and sink.rejected == []
            row = sink.accepted[0]
            assert row["attempts"] == 1 and row["endpoint"] == pool.endpoints[0].url
            assert row["reasoning"] and row["answer"]
            assert metrics.requests == 1 and metrics.accepted == 1
            assert pool.endpoints[0].inflight == 0 and pool.endpoints[0].ok == 1

    asyncio.run(scenario())


def test_server_errors_use_attempts_and_back_off_as_the_policy_says() -> None:
    plan = FaultPlan(seed=0, p_500=0.5)
    p = prompt_with_faults(plan, ["500", "500", None])

    async def scenario() -> None:
        cfg = make_config(max_attempts=3)
        sleeps = Sleeps()
        async with endpoints(cfg, sim_config(p_500=0.5)) as pool:
            d, sink, metrics = dispatcher(cfg, pool, retry=RetryPolicy(1.0, 8.0, rng=random.Random(7)), sleep=sleeps)
            await d.process(p)
            assert [r["attempts"] for r in sink.accepted] == [3]  # both 500s were counted
            assert metrics.requests == 3 and metrics.retries == 2 and metrics.endpoint_failures == 0
            twin = RetryPolicy(1.0, 8.0, rng=random.Random(7))
            assert sleeps.delays == [twin.delay_for(1), twin.delay_for(2)]  # backoff after each failure, in order
            assert (await sim_stats(pool.endpoints[0]))["requests"] == 3

    asyncio.run(scenario())


def test_server_errors_beyond_max_attempts_reject_the_prompt_without_a_last_sleep() -> None:
    plan = FaultPlan(seed=0, p_500=0.5)
    p = prompt_with_faults(plan, ["500", "500", None])

    async def scenario() -> None:
        cfg = make_config(max_attempts=2)
        sleeps = Sleeps()
        async with endpoints(cfg, sim_config(p_500=0.5)) as pool:
            d, sink, metrics = dispatcher(cfg, pool, sleep=sleeps)
            await d.process(p)
            assert sink.accepted == []
            [row] = sink.rejected
            assert (row["id"], row["reason"], row["attempts"]) == (p.id, "exhausted_retries", 2)
            assert "HTTP 500" in row["detail"]
            assert metrics.requests == 2  # max_attempts is the most requests sent, the first included
            assert len(sleeps.delays) == 1  # no backoff after the last attempt: nothing follows it

    asyncio.run(scenario())


def test_a_timeout_uses_an_attempt_and_the_retry_succeeds() -> None:
    plan = FaultPlan(seed=0, p_hang=0.5)
    p = prompt_with_faults(plan, ["hang", None])

    async def scenario() -> None:
        # the hung request would last forever; the timeout is a small fraction of that
        cfg = make_config(max_attempts=2, request_timeout_s=0.3)
        async with endpoints(cfg, sim_config(p_hang=0.5)) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            watch = asyncio.create_task(d.watch_hangs())  # request_timeout_s is the hang watch's, as in a run
            started = time.monotonic()
            await d.process(p)
            waited = time.monotonic() - started
            watch.cancel()
            assert [r["attempts"] for r in sink.accepted] == [2]
            assert metrics.retries == 1 and metrics.endpoint_failures == 0
            assert any("request timed out after 0.3s (request_timeout_s)" in e for e in metrics.last_errors)
            # given up once the timeout ran out (the retry is instant); the hung request itself would last forever
            assert 0.3 <= waited < 10, waited

            async def aborted() -> bool:  # the simulator held it until /abort_request named it
                return (await sim_stats(pool.endpoints[0]))["in_flight"] == 0

            await until(aborted)

    asyncio.run(scenario())


def test_a_plain_request_past_request_timeout_s_is_aborted_on_the_server() -> None:
    """SGLang sees a non-streaming request's gone client only after seconds without output, so a request given up at
    request_timeout_s would decode to its end for nobody: it is aborted by its rid (the simulator decodes for
    nobody too, `disconnect_check_s`). Before the hang watch owned this timeout, only a learned deadline aborted."""

    async def scenario() -> None:
        cfg = make_config(max_attempts=1, request_timeout_s=0.4, stream=False)
        slow = SimConfig(served_model_name=MODEL, decode_tokens_per_s=20, mean_output_tokens=100, disconnect_check_s=30)
        async with endpoints(cfg, slow) as pool:  # ~5 s a request, 12x the timeout
            d, sink, metrics = dispatcher(cfg, pool)
            watch = asyncio.create_task(d.watch_hangs())
            await d.process(prompt(7))
            watch.cancel()
            [row] = sink.rejected
            assert row["reason"] == "exhausted_retries"
            assert "request timed out after 0.4s (request_timeout_s); aborted" in row["detail"]
            assert metrics.endpoint_failures == 0  # a timeout is the prompt's failed attempt, not a hang

            async def aborted() -> bool:
                stats = await sim_stats(pool.endpoints[0])
                return bool(stats["cancelled"] == 1 and stats["in_flight"] == 0)

            await until(aborted)  # well before the ~5 s the decode would take for nobody
            assert (await sim_stats(pool.endpoints[0]))["generations_total"] == 0

    asyncio.run(scenario())


def test_rejected_completions_use_attempts_and_the_last_verdict_is_the_reason() -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=3)
        async with endpoints(cfg, sim_config(p_empty=1.0)) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            await d.process(prompt(2))
            [row] = sink.rejected
            assert (row["reason"], row["attempts"]) == ("empty_response", 3)
            assert metrics.requests == 3 and metrics.rejected_by_reason == {"empty_response": 1}
            assert pool.endpoints[0].state == HEALTHY  # a bad completion is data, not an endpoint failure

    asyncio.run(scenario())


def test_a_prompt_the_server_refuses_is_rejected_once_without_blaming_the_endpoint() -> None:
    long = Prompt(id="long", messages=({"role": "user", "content": "word " * 4000},))

    async def scenario() -> None:
        cfg = make_config(max_attempts=4)
        async with endpoints(cfg, sim_config(context_length=4096)) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            await d.process(prompt(1))  # the server has served a prompt: a 400 now is this prompt's own
            await d.process(long)
            [row] = sink.rejected
            assert (row["reason"], row["attempts"]) == ("context_length", 1)  # its own reason, never retried
            assert "longer than the model's context length (4096 tokens)" in row["detail"]
            assert metrics.requests == 2
            ep = pool.endpoints[0]
            assert ep.state == HEALTHY and ep.errors == 0 and ep.inflight == 0

    asyncio.run(scenario())


def test_a_prompt_past_the_context_is_its_own_reject_even_before_any_completion() -> None:
    """A context-length 400 is a fact about the prompt (issue 37): rejected `context_length` on the first answer,
    never retried, served prompt or not. (Any other 400 before the first completion may be the config's, issue 20:
    tests/integration/test_infrastructure_failures.py.)"""
    long = Prompt(id="long", messages=({"role": "user", "content": "word " * 4000},))

    async def scenario() -> None:
        cfg = make_config(max_attempts=3)  # max_tokens 2048: it fits; the prompt alone does not
        async with endpoints(cfg, sim_config(context_length=3000)) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            await d.process(long)
            [row] = sink.rejected
            assert (row["reason"], row["attempts"]) == ("context_length", 1)
            assert "is longer than the model's context length (3000 tokens)" in row["detail"]
            assert metrics.requests == 1

    asyncio.run(scenario())


def test_a_refused_connection_moves_the_prompt_without_using_an_attempt() -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=1)  # one attempt: any counted failure would reject the prompt
        sleeps = Sleeps()
        async with endpoints(cfg, closed_port_url(), sim_config()) as pool:
            dead, good = pool.endpoints
            d, sink, metrics = dispatcher(cfg, pool, sleep=sleeps)
            await d.process(prompt(3))  # ties go to the first endpoint: the dead one is tried first
            [row] = sink.accepted
            assert (row["attempts"], row["endpoint"]) == (1, good.url)
            assert metrics.requests == 2 and metrics.endpoint_failures == 1 and metrics.retries == 0
            assert dead.state == DOWN and dead.inflight == 0
            assert sleeps.delays == []  # another endpoint is tried at once

    asyncio.run(scenario())


def test_a_prompt_that_takes_every_server_down_is_stopped_by_its_own_bound() -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=1, max_endpoint_failures=3)
        resetting = [sim_config(p_reset=1.0, seed=s) for s in range(3)]
        async with endpoints(cfg, *resetting) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            await d.process(prompt(4))
            [row] = sink.rejected
            assert row["reason"] == "exhausted_retries" and "3 endpoint failures" in row["detail"]
            # three requests for a prompt allowed one attempt: endpoint failures are not attempts
            assert metrics.requests == 3 and metrics.endpoint_failures == 3
            assert [ep.state for ep in pool.endpoints] == [DOWN, DOWN, DOWN]
            assert [(await sim_stats(ep))["requests"] for ep in pool.endpoints] == [1, 1, 1]

    asyncio.run(scenario())


def retire(pool: Pool, ep: EndpointState) -> None:
    """What the health monitor does with an endpoint that restarted with other args: kill, then retire."""
    pool.kill(ep, "restarted with a different configuration")
    pool.retire(ep, "restarted with a different configuration")


def kill(pool: Pool, ep: EndpointState) -> None:
    pool.kill(ep, "3 health probes failed")


@pytest.mark.parametrize(("declare", "final_state"), [(kill, DOWN), (retire, RETIRED)], ids=["killed", "retired"])
def test_a_request_cancelled_because_its_endpoint_died_is_retried_elsewhere_without_an_attempt(
    declare: Callable[[Pool, EndpointState], None], final_state: str
) -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=1)
        async with endpoints(cfg, sim_config(p_hang=1.0), sim_config()) as pool:
            hung, good = pool.endpoints
            d, sink, metrics = dispatcher(cfg, pool)
            task = asyncio.create_task(d.process(prompt(5)))

            async def hanging() -> bool:
                return (await sim_stats(hung))["in_flight"] == 1

            await until(hanging)
            declare(pool, hung)
            await task
            [row] = sink.accepted
            assert (row["attempts"], row["endpoint"]) == (1, good.url)
            assert metrics.endpoint_failures == 1 and metrics.retries == 0
            assert hung.state == final_state  # a retired endpoint is not brought back as merely down
            assert hung.inflight == 0 and hung.tasks == set()

    asyncio.run(scenario())


@pytest.mark.parametrize("stopping", [True, False], ids=["drain", "plain-cancel"])
def test_a_cancellation_that_is_not_an_endpoint_death_propagates_and_frees_the_slot(stopping: bool) -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=1)
        async with endpoints(cfg, sim_config(p_hang=1.0), sim_config()) as pool:
            hung = pool.endpoints[0]
            d, sink, metrics = dispatcher(cfg, pool)
            d.stopping = stopping
            task = asyncio.create_task(d.process(prompt(6)))

            async def hanging() -> bool:
                return (await sim_stats(hung))["in_flight"] == 1

            await until(hanging)
            if stopping:
                kill(pool, hung)  # during a drain, even a kill's cancellation is the drain's
            else:
                task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert sink.ids == []  # the prompt stays pending for the next run
            assert hung.inflight == 0 and pool.endpoints[1].inflight == 0
            assert metrics.requests == 1

    asyncio.run(scenario())


def test_an_unauthorized_endpoint_stops_the_run_instead_of_rejecting_prompts() -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=4)
        async with endpoints(cfg, sim_config(api_key="secret")) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            with pytest.raises(FatalEndpointError, match="401"):
                await d.process(prompt(7))
            assert sink.ids == [] and pool.endpoints[0].inflight == 0

    asyncio.run(scenario())


def test_feed_takes_a_prompt_only_when_a_slot_is_free() -> None:
    async def scenario() -> None:
        cfg = make_config(max_attempts=1)
        async with endpoints(cfg, sim_config(p_hang=1.0), capacity=2) as pool:
            ep = pool.endpoints[0]
            d, sink, _ = dispatcher(cfg, pool)
            queue: asyncio.Queue[Prompt | None] = asyncio.Queue()
            for i in range(10):
                queue.put_nowait(prompt(i))
            async with asyncio.TaskGroup() as tg:
                feeder = tg.create_task(d.feed(queue, tg))

                async def two_running() -> bool:
                    return (await sim_stats(ep))["in_flight"] == 2

                await until(two_running)
                await asyncio.sleep(0.1)
                seen = (len(d.inflight), queue.qsize())
                d.stopping = True  # what the runner's drain does: stop the intake, cancel what is in flight
                feeder.cancel()
                for task in list(d.inflight):
                    task.cancel()
            assert seen == (2, 8)  # two requests on two slots; no prompt is taken while it waits for a slot
            assert ep.inflight == 0 and sink.ids == []

    asyncio.run(scenario())


def test_feed_drives_every_prompt_to_one_place_and_gives_every_slot_back() -> None:
    ids = [f"p{i}" for i in range(30)]

    async def scenario() -> None:
        cfg = make_config(max_attempts=2)
        async with endpoints(cfg, sim_config(p_500=0.2, p_empty=0.2), sim_config(), capacity=3) as pool:
            d, sink, metrics = dispatcher(cfg, pool)
            queue: asyncio.Queue[Prompt | None] = asyncio.Queue(maxsize=4)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(d.feed(queue, tg))
                for i in range(30):
                    await queue.put(prompt(i))
                await queue.put(None)
            assert sorted(sink.ids) == sorted(ids)  # each exactly once
            assert metrics.accepted + metrics.rejected == 30 and sink.accepted
            assert [ep.inflight for ep in pool.endpoints] == [0, 0]
            assert d.inflight == set()

    asyncio.run(scenario())
