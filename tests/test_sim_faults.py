"""Fault knobs, the timing model and the queue over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import httpx
import orjson
import pytest

from pipeline.sim import SimConfig, serve
from pipeline.sim.faults import FaultPlan

T = TypeVar("T")


def _body(i: int = 0, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2000, **kw}


async def _until(probe: Callable[[], Awaitable[T]], what: str) -> T:
    """Poll `probe` until it returns something true, and return that: the tests synchronise on the server's state,
    never on a sleep (the 30 s bound is for a hang, not a measure)."""
    deadline = time.monotonic() + 30
    while not (value := await probe()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
    return value


async def _refused(url: str) -> bool:
    """A new connection to the server's port is refused (its port closed)."""
    async with httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        try:
            await c.get("/health")
        except httpx.ConnectError:
            return True
    return False


async def _running(c: httpx.AsyncClient) -> int:
    return int((await c.get("/v1/loads")).json()["loads"][0]["num_running_reqs"])


async def _load_is(c: httpx.AsyncClient, *, running: int, waiting: int) -> bool:
    load = (await c.get("/v1/loads")).json()["loads"][0]
    return bool(load["num_running_reqs"] == running and load["num_waiting_reqs"] == waiting)


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def _settled(c: httpx.AsyncClient) -> dict[str, Any] | None:
    """The stats once the server answers (after a restart) with nothing in flight, else None."""
    try:
        stats = (await c.get("/_sim/stats")).json()
    except httpx.HTTPError:
        return None  # still down
    return stats if stats["in_flight"] == 0 else None


async def _stats_if(c: httpx.AsyncClient, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    stats = (await c.get("/_sim/stats")).json()
    return stats if condition(stats) else None


def test_fault_draws_are_deterministic_and_roughly_calibrated() -> None:
    plan = FaultPlan(seed=7, p_500=0.2, p_hang=0.1)
    draws = [plan.draw(f"k{i}", 0) for i in range(2000)]
    assert draws == [FaultPlan(seed=7, p_500=0.2, p_hang=0.1).draw(f"k{i}", 0) for i in range(2000)]
    assert 330 < draws.count("500") < 470 and 140 < draws.count("hang") < 260
    assert draws != [FaultPlan(seed=8, p_500=0.2, p_hang=0.1).draw(f"k{i}", 0) for i in range(2000)]
    with pytest.raises(ValueError, match="sum to at most 1"):
        FaultPlan(seed=0, p_500=0.7, p_503=0.7)


@pytest.mark.parametrize(
    ("knob", "status"),
    [("p_500", 500), ("p_503", 503)],
    ids=["500", "503"],
)
def test_error_faults(knob: str, status: int) -> None:
    async def main() -> None:
        async with serve(SimConfig(**{knob: 1.0})) as url, httpx.AsyncClient(base_url=url) as c:
            r = await c.post("/v1/chat/completions", json=_body())
            assert r.status_code == status
            assert r.json()["code"] == status
            if status == 503:
                assert r.json() == {
                    "object": "error",
                    "message": "The request queue is full.",
                    "type": "503",
                    "param": None,
                    "code": 503,
                }
                s = await c.post("/v1/chat/completions", json=_body(stream=True))
                assert (
                    s.status_code == 200
                    and '"type":"SERVICE_UNAVAILABLE"' in s.text
                    and s.text.endswith("data: [DONE]\n\n")
                )
            stats = (await c.get("/_sim/stats")).json()
            assert stats["faults"][knob[2:]] >= 1 and stats["generations_total"] == 0

    asyncio.run(main())


def test_content_faults() -> None:
    async def main() -> None:
        cfg = SimConfig(reasoning_parser="qwen3", mean_output_tokens=100)
        async with serve(cfg.replace(p_empty=1.0)) as url, httpx.AsyncClient(base_url=url) as c:
            choice = (await c.post("/v1/chat/completions", json=_body())).json()["choices"][0]
            assert choice["message"]["content"] == "" and not choice["message"]["reasoning_content"]
            assert choice["finish_reason"] == "stop"
        async with serve(cfg.replace(p_answer_in_reasoning=1.0)) as url, httpx.AsyncClient(base_url=url) as c:
            choice = (await c.post("/v1/chat/completions", json=_body())).json()["choices"][0]
            assert choice["message"]["content"] == "" and choice["finish_reason"] == "stop"
            assert "The answer is" in choice["message"]["reasoning_content"]
        async with serve(cfg.replace(p_invalid_json=1.0)) as url, httpx.AsyncClient(base_url=url) as c:
            r = await c.post("/v1/chat/completions", json=_body())
            assert r.status_code == 200
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(r.content)
            assert (await c.get("/_sim/stats")).json()["generations_total"] == 1  # the GPU did the work

    asyncio.run(main())


def test_reset_fault_breaks_the_connection() -> None:
    async def main() -> None:
        async with serve(SimConfig(p_reset=1.0, mean_output_tokens=400)) as url:
            async with httpx.AsyncClient(base_url=url) as c:
                with pytest.raises(httpx.TransportError):
                    await c.post("/v1/chat/completions", json=_body())
                with pytest.raises(httpx.TransportError):
                    await c.post("/v1/chat/completions", json=_body(stream=True))
            async with httpx.AsyncClient(base_url=url) as c:
                assert (await c.get("/_sim/stats")).json()["faults"]["reset"] == 2

    asyncio.run(main())


def test_hang_until_client_disconnects() -> None:
    async def main() -> None:
        async with serve(SimConfig(p_hang=1.0)) as url, httpx.AsyncClient(base_url=url) as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.post("/v1/chat/completions", json=_body(), timeout=0.3)
            stats = (await c.get("/_sim/stats")).json()
            assert stats["faults"]["hang"] == 1
            # the server notices the disconnect and drops the request
            await _until(lambda: _stats_if(c, lambda s: s["in_flight"] == 0), "the hung request to be dropped")

    asyncio.run(main())


def test_die_after_n_responses() -> None:
    async def main() -> None:
        async with serve(SimConfig(die_after=2, mean_output_tokens=20)) as url:
            async with httpx.AsyncClient(base_url=url) as c:
                for i in range(2):
                    assert (await c.post("/v1/chat/completions", json=_body(i))).status_code == 200
            await _until(lambda: _refused(url), "the port to close after the second response")
            async with httpx.AsyncClient(base_url=url) as c:
                with pytest.raises(httpx.ConnectError):  # and it stays closed
                    await c.post("/v1/chat/completions", json=_body(3))

    asyncio.run(main())


def test_slow_start_then_warmup_then_healthy() -> None:
    """Port closed for slow_start_s, then open and warming up (health 503, generation served) for warmup_s, then
    healthy. Each phase is waited for by its state; the windows (2 s) are a hundred times a local request."""

    async def health(c: httpx.AsyncClient) -> int:
        try:
            return (await c.get("/health")).status_code
        except httpx.ConnectError:
            return 0

    async def main() -> None:
        async with serve(SimConfig(slow_start_s=2.0, warmup_s=2.0)) as url, httpx.AsyncClient(base_url=url) as c:
            assert await health(c) == 0  # the port is not open yet
            assert await _until(lambda: health(c), "the port to open") == 503  # open, warming up
            assert (await c.get("/model_info")).status_code == 200
            assert (await c.post("/v1/chat/completions", json=_body(max_tokens=5))).status_code == 200
            await _until(lambda: _ok(health(c)), "health 200 once warm")

    async def _ok(status: Awaitable[int]) -> bool:
        return await status == 200

    asyncio.run(main())


async def _post_all(url: str, n: int, **kw: Any) -> list[tuple[int, float]]:
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> tuple[int, float]:
            t0 = time.perf_counter()
            async with session.post(url + "/v1/chat/completions", json=_body(i, **kw)) as r:
                await r.read()
                return r.status, time.perf_counter() - t0

        return await asyncio.gather(*(one(i) for i in range(n)))


def test_batching_bounds_concurrency_in_waves() -> None:
    # 4 running slots, 16 requests of exactly 100 tokens at 1000 tok/s aggregate: a wave is 100 * 4 / 1000 = 0.4 s
    # (long enough that scheduling noise on a busy machine stays small next to it)
    cfg = SimConfig(
        model_path="Qwen/Qwen3-8B", max_running_requests=4, decode_tokens_per_s=1000, mean_output_tokens=5000
    )

    async def main() -> None:
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            seen: list[tuple[int, int]] = []  # (running, waiting) as the server reports them

            async def watch() -> None:
                while True:
                    load = (await c.get("/v1/loads")).json()["loads"][0]
                    seen.append((load["num_running_reqs"], load["num_waiting_reqs"]))
                    await asyncio.sleep(0.02)

            watcher = asyncio.create_task(watch())
            t0 = time.perf_counter()
            results = await _post_all(url, 16, max_tokens=100)
            total = time.perf_counter() - t0
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        wave = 0.4
        assert all(status == 200 for status, _ in results)
        assert max(running for running, _ in seen) == 4  # never more than the slots at once
        assert max(waiting for _, waiting in seen) >= 8  # the rest queued
        # about 4 waves: lower bounds (a busy machine only stretches them), never all 16 at once
        assert total >= 3.5 * wave, total
        latencies = sorted(lat for _, lat in results)
        assert latencies[-1] > 3.5 * wave, latencies

    asyncio.run(main())


def test_queue_full_503_and_streaming_progress() -> None:
    cfg = SimConfig(
        model_path="Qwen/Qwen3-8B",
        max_running_requests=1,
        max_queued_requests=1,
        decode_tokens_per_s=500,
        mean_output_tokens=5000,  # every request decodes to its max_tokens
        reasoning_parser="qwen3",
    )

    async def main() -> None:
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            # one running and one queued (2,000 tokens at 500 tok/s: seconds each, ended by /abort_request below);
            # the test waits for the server to report both before it sends more, never on arrival order
            held = [asyncio.create_task(c.post("/v1/chat/completions", json=_body(i, rid=f"r{i}"))) for i in range(2)]
            await _until(lambda: _load_is(c, running=1, waiting=1), "one request running and one queued")
            for i in (2, 3):
                assert (await c.post("/v1/chat/completions", json=_body(i))).status_code == 503
            assert (await c.post("/abort_request", json={"abort_all": True})).status_code == 200
            assert sorted(r.status_code for r in await asyncio.gather(*held)) == [200, 200]  # graceful aborts
            chunks = 0
            async with c.stream("POST", "/v1/chat/completions", json=_body(stream=True, max_tokens=100)) as r:
                async for line in r.aiter_lines():
                    chunks += line.startswith("data: ")
            assert chunks > 5  # 0.2 s of decoding flushed in several events
            stats = (await c.get("/_sim/stats")).json()
            assert stats["faults"]["queue_full"] == 2

    asyncio.run(main())


def test_abort_request_gives_graceful_abort() -> None:
    cfg = SimConfig(model_path="Qwen/Qwen3-8B", decode_tokens_per_s=100, max_running_requests=4)

    async def main() -> None:
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            task = asyncio.create_task(c.post("/v1/chat/completions", json=_body(rid="r1", max_tokens=1000)))
            await _until(lambda: _running(c), "r1 to be decoding")
            await asyncio.sleep(0.2)  # some tokens decoded (at 100 tok/s; 10 s would finish it)
            assert (await c.post("/abort_request", json={"rid": "r1"})).status_code == 200
            body = (await task).json()
            assert body["id"] == "r1" and body["choices"][0]["finish_reason"] == "abort"
            assert 0 < body["usage"]["completion_tokens"] < 1000
            stats = (await c.get("/_sim/stats")).json()
            assert stats["cancelled"] == 1 and stats["generations_total"] == 0 and stats["running"] == 0

    asyncio.run(main())


def test_down_after_n_then_recovers_on_the_same_port() -> None:
    async def main() -> None:
        cfg = SimConfig(down_after=2, down_for_s=1.0, warmup_s=3.0, mean_output_tokens=20)
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection per request: sees the port state
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url, limits=limits) as c:
            for i in range(2):
                assert (await c.post("/v1/chat/completions", json=_body(i))).status_code == 200
            await _until(lambda: _refused(url), "the port to close after the second response")

            async def back() -> httpx.Response | None:
                try:
                    return await c.get("/health")
                except httpx.ConnectError:
                    return None

            health = await _until(back, "the port to open again")
            assert health.status_code == 503  # warming up again, like a restarted SGLang
            for i in range(3, 6):  # once: it stays up past another N responses
                assert (await c.post("/v1/chat/completions", json=_body(i))).status_code == 200
            stats = (await c.get("/_sim/stats")).json()
            assert stats["faults"]["down"] == 1 and stats["generations_total"] == 5

    asyncio.run(main())


def test_down_drops_an_open_stream() -> None:
    async def main() -> None:
        cfg = SimConfig(down_after=1, down_for_s=0.3, trickle_s=0.05, mean_output_tokens=400)
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url, timeout=5) as c:
            async with c.stream("POST", "/v1/chat/completions", json=_body(stream=True)) as r:
                await c.post("/v1/chat/completions", json=_body(1, max_tokens=5))  # the Nth response: down
                with pytest.raises(httpx.RemoteProtocolError):
                    async for _ in r.aiter_lines():
                        pass
            stats = await _until(lambda: _settled(c), "the server back with the dropped stream ended")
            assert stats["cancelled"] == 1 and stats["in_flight"] == 0

    asyncio.run(main())


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [(0.0, False), (2.9, False), (3.0, True), (3.99, True), (4.0, False), (6.9, False), (7.5, True)],
    ids=["open", "before", "starts", "inside", "ends", "between", "second"],
)
def test_503_bursts_are_the_last_seconds_of_each_period(elapsed: float, expected: bool) -> None:
    from pipeline.sim.faults import in_burst

    assert in_burst(elapsed, every_s=4.0, for_s=1.0) is expected
    assert not in_burst(elapsed, every_s=0.0, for_s=1.0)


def test_503_bursts_refuse_generations_while_health_stays_up() -> None:
    async def main() -> None:
        cfg = SimConfig.from_argv(["--fail-503-every", "0.4", "--fail-503-for", "0.2", "--mean-output-tokens", "20"])
        assert (cfg.fail_503_every_s, cfg.fail_503_for_s) == (0.4, 0.2)
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            statuses, healths = [], []
            deadline = time.monotonic() + 30  # a bound on a hang: the loop ends on what it saw
            i = 0
            # until a burst came and went and the next began (the share of the time they take is in_burst's,
            # tested above without a clock)
            while sum(a != b for a, b in itertools.pairwise(statuses)) < 3:
                assert time.monotonic() < deadline, statuses
                statuses.append((await c.post("/v1/chat/completions", json=_body(i))).status_code)
                healths.append((await c.get("/health")).status_code)
                i += 1
                await asyncio.sleep(0.01)
            stats = (await c.get("/_sim/stats")).json()
        assert {200, 503} == set(statuses) and set(healths) == {200}
        assert stats["faults"]["burst_503"] == statuses.count(503) and stats["generations_total"] == statuses.count(200)

    asyncio.run(main())


def test_a_frozen_engine_makes_no_progress_while_stopped() -> None:
    """SIGSTOP freezes a real server's decoding: when the clock next advances long after the last heartbeat, the
    engine credits progress only up to that heartbeat. Not even the request due first during the freeze completes on
    waking (crediting up to its due time once finished it on SIGCONT, after its client had moved it elsewhere)."""
    from pipeline.sim.engine import STALL_S, Engine

    async def main() -> None:
        now = [0.0]
        engine = Engine(max_running=2, decode_tokens_per_s=200, batch_half=1, clock=lambda: now[0])
        short, long = engine.submit(10), engine.submit(100)  # 100 tok/s each: `short` is due at 0.1 s
        now[0] = 0.05
        engine.beat()  # the last sign of life: 5 tokens each
        now[0] = 0.05 + STALL_S + 10.0  # then the process was stopped, past `short`'s due time, for ten seconds
        engine.beat()  # the first heartbeat after SIGCONT
        assert engine.progress(short) == 5 and engine.progress(long) == 5 and not short.done.done()
        assert engine.stalled_s == pytest.approx(STALL_S + 10.0)
        now[0] += 0.05  # running again: `short` ends 0.05 s after waking, not at it
        engine.abort(long)  # anything that advances the clock
        assert short.done.done() and not short.aborted and short.generated == 10
        assert long.aborted and long.generated == pytest.approx(10)
        engine.close()

    asyncio.run(main())


def test_disconnect_check_a_decode_whose_client_left_goes_on_unless_aborted() -> None:
    """SGLang sees a non-streaming request's gone client only after 4 s without output: a decoding request runs to
    its end for nobody (a generation, still running in /v1/loads) unless /abort_request names it."""
    cfg = SimConfig(decode_tokens_per_s=100, max_running_requests=4, mean_output_tokens=100, disconnect_check_s=0.3)

    async def main() -> None:
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            async with httpx.AsyncClient(base_url=url) as leaving:
                gone = [
                    asyncio.create_task(leaving.post("/v1/chat/completions", json=_body(i, rid=f"r{i}")))
                    for i in range(2)
                ]
                await _until(lambda: _equals(_running(c), 2), "both requests decoding")
                for task in gone:
                    task.cancel()  # the client closes both connections mid-decode
                await asyncio.gather(*gone, return_exceptions=True)
            assert await _running(c) == 2  # still decoding, for nobody
            assert (await c.post("/abort_request", json={"rid": "r1"})).status_code == 200
            stats = await _until(lambda: _stats_if(c, lambda s: s["in_flight"] == 0), "both decodes to end")
            assert stats["generations_by_rid"] == {"r0": 1} and stats["cancelled"] == 1 and stats["in_flight"] == 0

    asyncio.run(main())


def test_disconnect_check_a_restart_ends_the_decodes_whose_client_left() -> None:
    """A restarted process loses its whole batch, decodes whose client had left included."""
    cfg = SimConfig(
        decode_tokens_per_s=100, max_running_requests=4, mean_output_tokens=200, disconnect_check_s=0.3,
        down_after=1, down_for_s=0.3,
    )  # fmt: skip

    async def main() -> None:
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url, timeout=5) as c:
            long = asyncio.create_task(c.post("/v1/chat/completions", json=_body(0, rid="long")))
            await _until(lambda: _running(c), "the long request to be decoding")
            await c.post("/v1/chat/completions", json=_body(1, max_tokens=2))  # the Nth response: down
            with pytest.raises(httpx.HTTPError):
                await long
            stats = await _until(lambda: _settled(c), "the server back with nothing in flight")
            assert "long" not in stats["generations_by_rid"] and stats["in_flight"] == 0 and stats["cancelled"] == 1

    asyncio.run(main())
