"""Fault knobs, the timing model and the queue over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
import httpx
import orjson
import pytest

from pipeline.sim import SimConfig, serve
from pipeline.sim.faults import FaultPlan


def _body(i: int = 0, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2000, **kw}


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
            for _ in range(50):  # the server notices the disconnect and drops the request
                if (await c.get("/_sim/stats")).json()["in_flight"] == 0:
                    break
                await asyncio.sleep(0.02)
            assert (await c.get("/_sim/stats")).json()["in_flight"] == 0

    asyncio.run(main())


def test_die_after_n_responses() -> None:
    async def main() -> None:
        async with serve(SimConfig(die_after=2, mean_output_tokens=20)) as url:
            async with httpx.AsyncClient(base_url=url) as c:
                for i in range(2):
                    assert (await c.post("/v1/chat/completions", json=_body(i))).status_code == 200
            await asyncio.sleep(0.05)
            async with httpx.AsyncClient(base_url=url) as c:
                with pytest.raises(httpx.ConnectError):
                    await c.post("/v1/chat/completions", json=_body(3))

    asyncio.run(main())


def test_slow_start_then_warmup_then_healthy() -> None:
    async def main() -> None:
        async with serve(SimConfig(slow_start_s=0.3, warmup_s=0.3)) as url, httpx.AsyncClient(base_url=url) as c:
            with pytest.raises(httpx.ConnectError):
                await c.get("/health")
            await asyncio.sleep(0.4)
            assert (await c.get("/health")).status_code == 503
            assert (await c.get("/model_info")).status_code == 200
            assert (await c.post("/v1/chat/completions", json=_body(max_tokens=5))).status_code == 200
            await asyncio.sleep(0.3)
            assert (await c.get("/health")).status_code == 200

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
        async with serve(cfg) as url:
            t0 = time.perf_counter()
            results = await _post_all(url, 16, max_tokens=100)
            total = time.perf_counter() - t0
        wave = 0.4
        assert all(status == 200 for status, _ in results)
        assert 3.5 * wave <= total <= 6 * wave, total  # about 4 waves, never all 16 at once
        latencies = sorted(lat for _, lat in results)
        assert latencies[3] < 1.75 * wave and latencies[-1] > 3.5 * wave, latencies

    asyncio.run(main())


def test_queue_full_503_and_streaming_progress() -> None:
    cfg = SimConfig(
        model_path="Qwen/Qwen3-8B",
        max_running_requests=1,
        max_queued_requests=1,
        decode_tokens_per_s=500,
        reasoning_parser="qwen3",
    )

    async def main() -> None:
        async with serve(cfg) as url:
            results = await _post_all(url, 4, max_tokens=40)
            statuses = sorted(s for s, _ in results)
            assert statuses == [200, 200, 503, 503]
            async with httpx.AsyncClient(base_url=url) as c:
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
            await asyncio.sleep(0.2)
            assert (await c.post("/abort_request", json={"rid": "r1"})).status_code == 200
            body = (await task).json()
            assert body["id"] == "r1" and body["choices"][0]["finish_reason"] == "abort"
            assert 0 < body["usage"]["completion_tokens"] < 1000
            stats = (await c.get("/_sim/stats")).json()
            assert stats["cancelled"] == 1 and stats["generations_total"] == 0 and stats["running"] == 0

    asyncio.run(main())


def test_down_after_n_then_recovers_on_the_same_port() -> None:
    async def main() -> None:
        cfg = SimConfig(down_after=2, down_for_s=0.4, warmup_s=1.0, mean_output_tokens=20)
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection per request: sees the port state
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url, limits=limits) as c:
            for i in range(2):
                assert (await c.post("/v1/chat/completions", json=_body(i))).status_code == 200
            await asyncio.sleep(0.05)
            with pytest.raises(httpx.ConnectError):
                await c.post("/v1/chat/completions", json=_body(3))
            for _ in range(100):
                with contextlib.suppress(httpx.ConnectError):
                    health = await c.get("/health")
                    break
                await asyncio.sleep(0.02)
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
            await asyncio.sleep(0.35)
            stats = (await c.get("/_sim/stats")).json()
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
            t0 = time.monotonic()
            i = 0
            while time.monotonic() - t0 < 1.0:
                statuses.append((await c.post("/v1/chat/completions", json=_body(i))).status_code)
                healths.append((await c.get("/health")).status_code)
                i += 1
                await asyncio.sleep(0.01)
            stats = (await c.get("/_sim/stats")).json()
        assert {200, 503} == set(statuses) and set(healths) == {200}
        assert 0.25 < statuses.count(503) / len(statuses) < 0.75  # half of each 0.4 s period
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
    cfg = SimConfig(decode_tokens_per_s=400, max_running_requests=4, mean_output_tokens=100, disconnect_check_s=0.3)

    async def main() -> None:
        async with serve(cfg) as url, httpx.AsyncClient(base_url=url) as c:
            async with httpx.AsyncClient(base_url=url) as leaving:
                gone = [
                    asyncio.create_task(leaving.post("/v1/chat/completions", json=_body(i, rid=f"r{i}")))
                    for i in range(2)
                ]
                await asyncio.sleep(0.1)
                for task in gone:
                    task.cancel()  # the client closes both connections mid-decode
                await asyncio.gather(*gone, return_exceptions=True)
            await asyncio.sleep(0.1)
            [load] = (await c.get("/v1/loads")).json()["loads"]
            assert load["num_running_reqs"] == 2  # still decoding, for nobody
            assert (await c.post("/abort_request", json={"rid": "r1"})).status_code == 200
            for _ in range(100):
                stats = (await c.get("/_sim/stats")).json()
                if stats["in_flight"] == 0:
                    break
                await asyncio.sleep(0.05)
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
            await asyncio.sleep(0.1)
            await c.post("/v1/chat/completions", json=_body(1, max_tokens=2))  # the Nth response: down
            with pytest.raises(httpx.HTTPError):
                await long
            await asyncio.sleep(0.5)
            stats = (await c.get("/_sim/stats")).json()
            assert "long" not in stats["generations_by_rid"] and stats["in_flight"] == 0 and stats["cancelled"] == 1

    asyncio.run(main())
