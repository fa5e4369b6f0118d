"""What each server says of itself (pipeline/endpoints/server_view.py): SGLang's and vLLM's /metrics and SGLang's
/v1/loads read into one view, the figures derived from counters, the run's means, and the watch over real HTTP (a
small aiohttp server on 127.0.0.1, and the simulator in process): a failed read marks the view stale and touches
nothing else, a server with neither path is "not reported" and asked again only every few intervals."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.pool import Pool
from pipeline.endpoints.server_view import (
    NOT_REPORTED,
    REDISCOVER_TICKS,
    Reading,
    ServerView,
    ServerWatch,
    parse_loads,
    parse_metrics,
    summary_line,
)
from pipeline.endpoints.state import EndpointState
from pipeline.engine.prometheus import Exporter
from pipeline.inspection.textview import server_lines
from pipeline.sim import SimConfig, serve
from pipeline.sim.state import Sim


def vllm_metrics(running: int, waiting: int, generated: float, drafts: float = 0, accepted: float = 0,
                 kv_name: str = "vllm:kv_cache_usage_perc", engines: int = 1) -> str:  # fmt: skip
    """A /metrics body as vLLM's v1 engine writes it (names from vllm/v1/metrics/loggers.py and
    vllm/v1/spec_decode/metrics.py): per-engine labels, HELP/TYPE lines, counters with their `_created` samples,
    a histogram in between, and the spec-decoding counters only when `drafts` is given."""
    lines = []

    def family(name: str, kind: str, doc: str, per_engine: Callable[[str], list[str]]) -> None:
        lines.extend([f"# HELP {name} {doc}", f"# TYPE {name} {kind}"])
        for e in range(engines):
            lines.extend(per_engine(f'engine="{e}",model_name="tiny-qwen3"'))

    family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           lambda lb: [f"vllm:num_requests_running{{{lb}}} {running / engines}"])  # fmt: skip
    family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           lambda lb: [f"vllm:num_requests_waiting{{{lb}}} {waiting / engines}"])  # fmt: skip
    family(kv_name, "gauge", "KV-cache usage. 1 means 100 percent usage.", lambda lb: [f"{kv_name}{{{lb}}} 0.25"])
    family("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries.",
           lambda lb: [f"vllm:prefix_cache_queries_total{{{lb}}} 1234.0",
                       f"vllm:prefix_cache_queries_created{{{lb}}} 1.7e9"])  # fmt: skip
    family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           lambda lb: [f"vllm:generation_tokens_total{{{lb}}} {generated / engines}",
                       f"vllm:generation_tokens_created{{{lb}}} 1.7e9"])  # fmt: skip
    family("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
           lambda lb: [f'vllm:time_to_first_token_seconds_bucket{{{lb},le="0.1"}} 3.0',
                       f'vllm:time_to_first_token_seconds_bucket{{{lb},le="+Inf"}} 4.0',
                       f"vllm:time_to_first_token_seconds_count{{{lb}}} 4.0",
                       f"vllm:time_to_first_token_seconds_sum{{{lb}}} 0.5"])  # fmt: skip
    if drafts:
        family("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
               lambda lb: [f"vllm:spec_decode_num_drafts_total{{{lb}}} {drafts / engines}"])  # fmt: skip
        family("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
               lambda lb: [f"vllm:spec_decode_num_accepted_tokens_total{{{lb}}} {accepted / engines}"])  # fmt: skip
    return "\n".join(lines) + "\n"


def test_the_vllm_sample_is_valid_prometheus_text() -> None:
    names = {f.name for f in text_string_to_metric_families(vllm_metrics(3, 1, 100, drafts=10, accepted=12))}
    assert {"vllm:num_requests_running", "vllm:generation_tokens", "vllm:spec_decode_num_drafts"} <= names


@pytest.mark.parametrize("engines", [1, 2], ids=["one-engine", "two-engines"])
def test_vllm_metrics_read_into_the_view_throughput_and_acceptance_from_counters(engines: int) -> None:
    first = parse_metrics(vllm_metrics(6, 2, 1000, drafts=100, accepted=150, engines=engines), at=100.0)
    assert first is not None
    assert (first.kind, first.source, first.running, first.queued) == ("vllm", "/metrics", 6, 2)
    assert first.kv_usage == pytest.approx(0.25) and first.gen_tokens_per_s is None
    view = ServerView("http://v")
    view.take(first, (None, None))
    assert view.gen_tokens_per_s is None  # one reading of a counter is no rate
    assert view.spec_accept_length == pytest.approx(2.5)  # its whole life so far: 1 + 150 / 100
    second = parse_metrics(vllm_metrics(8, 0, 3000, drafts=300, accepted=550, engines=engines), at=104.0)
    assert second is not None
    view.take(second, (16, "regen's slots"))
    shown = view.as_json()
    assert shown["gen_tokens_per_s"] == pytest.approx(500.0)  # (3000 - 1000) / 4 s
    assert shown["spec_accept_length"] == pytest.approx(3.0)  # 1 + (550 - 150) / (300 - 100)
    assert (shown["running"], shown["queued"], shown["capacity"], shown["occupancy"]) == (8, 0, 16, 0.5)
    assert shown["run"]["generation_tokens"] == 2000 and shown["run"]["span_s"] == pytest.approx(4.0)
    assert shown["run"]["mean_gen_tokens_per_s"] == pytest.approx(500.0)


def test_an_older_vllm_reports_kv_use_under_its_old_name_and_no_spec_decoding() -> None:
    reading = parse_metrics(vllm_metrics(1, 0, 10, kv_name="vllm:gpu_cache_usage_perc"), at=0.0)
    assert reading is not None and reading.kv_usage == pytest.approx(0.25)
    assert reading.spec_drafts is None and reading.spec_accepted is None


def test_sglang_metrics_of_the_simulator_read_into_the_view() -> None:
    sim = Sim(SimConfig.from_argv(["--enable-metrics", "--max-running-requests", "8", "--decode-rate", "1000"]))
    reading = parse_metrics(sim.metrics(), at=5.0)
    assert reading is not None
    assert (reading.kind, reading.running, reading.queued, reading.gen_tokens_per_s) == ("sglang", 0, 0, 0)
    assert reading.spec_accept_length is None  # SGLang's 0 without speculative decoding is "none"
    assert reading.generation_tokens == 0 and reading.max_total_tokens == 1_048_576


def test_sglang_loads_add_up_over_dp_ranks() -> None:
    rank = {"num_running_reqs": 30, "num_waiting_reqs": 4, "max_running_requests": 32, "token_usage": 0.5,
            "gen_throughput": 1500.0, "num_total_tokens": 100_000, "speculative": {"accept_length": 2.5}}  # fmt: skip
    reading = parse_loads({"loads": [rank, {**rank, "token_usage": 0.7, "speculative": {"accept_length": 3.5}}]}, 1.0)
    assert reading is not None and reading.source == "/v1/loads"
    assert (reading.running, reading.queued, reading.max_running, reading.gen_tokens_per_s) == (60, 8, 64, 3000)
    assert reading.kv_usage == pytest.approx(0.6) and reading.spec_accept_length == pytest.approx(3.0)
    view = ServerView("http://s")
    view.take(reading, (48, "preflight"))
    assert (view.capacity, view.capacity_source) == (64, "/v1/loads")  # what the server says now wins


@pytest.mark.parametrize(
    "body", [{"loads": []}, {"loads": "x"}, ["loads"], {"status": "ok"}], ids=["empty", "not-a-list", "list", "other"]
)
def test_other_json_is_not_loads(body: Any) -> None:
    assert parse_loads(body, 0.0) is None


def test_metrics_of_neither_kind_are_no_reading() -> None:
    assert parse_metrics("# HELP up x\n# TYPE up gauge\nup 1\nsgl_router_requests_total 5\n", 0.0) is None


def _reading(at: float, running: float, tokens: float | None, tps: float | None = None) -> Reading:
    return Reading(kind="sglang", source="/metrics", at=at, running=running, generation_tokens=tokens,
                   gen_tokens_per_s=tps)  # fmt: skip


def test_run_means_span_the_readings_and_only_those_taken_while_it_generated_are_its_samples() -> None:
    view = ServerView("http://s", interval_s=10.0)
    view.take(_reading(0, 0, 100, tps=0.0), (4, "preflight"), sample=False)  # as the run starts: idle
    for at, running, tokens in [(10, 2, 1100), (20, 4, 2100)]:
        view.take(_reading(at, running, tokens, tps=100.0), (4, "preflight"))
    view.take(_reading(25, 0, 2400, tps=0.0), (4, "preflight"), sample=False)  # after its last generation
    run = view.as_json()["run"]
    assert (run["readings"], run["samples"]) == (4, 2) and run["mean_occupancy"] == pytest.approx(0.75)
    assert run["generation_tokens"] == 2300 and run["mean_gen_tokens_per_s"] == pytest.approx(2300 / 25)
    line = summary_line("http://s", {"kind": "sglang", "source": "/metrics", "capacity": 4,
                                     "capacity_source": "preflight", "run": run})  # fmt: skip
    assert (
        line == "  server http://s (sglang /metrics, 4 readings): mean 92 gen tok/s, mean occupancy 75% of 4 running "
        "(preflight)"
    )


def test_a_run_shorter_than_the_interval_says_it_had_no_reading_while_it_generated() -> None:
    view = ServerView("http://s", interval_s=10.0)
    for at in (0, 6):
        view.take(Reading(kind="sglang", source="/v1/loads", at=at, running=0, gen_tokens_per_s=0.0), (4, "preflight"),
                  sample=False)  # fmt: skip
    shown = view.as_json()
    assert shown["run"]["mean_gen_tokens_per_s"] is None and shown["run"]["mean_occupancy"] is None
    assert summary_line("http://s", shown).endswith("2 readings): no reading while the run generated (one every 10s)")


def test_a_counter_that_goes_back_falls_back_to_the_readings_mean() -> None:
    view = ServerView("http://s")
    for at, tokens, tps in [(0, 5000, 300.0), (10, 8000, 300.0), (20, 50, 600.0)]:  # the server restarted
        view.take(_reading(at, 1, tokens, tps), (4, "preflight"))
    run = view.as_json()["run"]
    assert run["generation_tokens"] is None and run["mean_gen_tokens_per_s"] == pytest.approx(400.0)


class Figures:
    """A server on 127.0.0.1 whose /metrics and /v1/loads answer what the test sets (None: 404)."""

    def __init__(self) -> None:
        self.metrics: str | None = None
        self.loads: dict[str, Any] | None = None
        self.status = 200
        self.asked: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._answer)
        app.router.add_get("/v1/loads", self._answer)
        return app

    async def _answer(self, request: web.Request) -> web.Response:
        self.asked.append(request.path)
        if self.status != 200:
            return web.Response(status=self.status, text="busy")
        if request.path == "/metrics" and self.metrics is not None:
            return web.Response(text=self.metrics, content_type="text/plain")
        if request.path == "/v1/loads" and self.loads is not None:
            return web.json_response(self.loads)
        raise web.HTTPNotFound()


@asynccontextmanager
async def watching(url: str, clock: Callable[[], float], capacity: int = 16) -> AsyncIterator[ServerWatch]:
    client = EndpointClient(url, gen=GenerationConfig(), client=ClientConfig(connect_timeout_s=2.0))
    async with client:
        pool = Pool([EndpointState(client=client, capacity=capacity)])
        yield ServerWatch(pool, interval_s=1.0, clock=clock)


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def test_the_watch_reads_vllm_over_http_and_a_failed_read_marks_the_view_stale() -> None:
    server, now = Figures(), [1000.0]

    async def scenario() -> list[dict[str, Any]]:
        seen = []
        async with serving(server.app()) as url, watching(url, lambda: now[0]) as watch:
            server.metrics = vllm_metrics(4, 1, 200)
            await watch.read_all()
            server.metrics, now[0] = vllm_metrics(5, 0, 1400), 1002.0
            await watch.read_all()
            seen.append(watch.snapshot()[url])
            server.status = 503
            await watch.read_all()
            seen.append(watch.snapshot()[url])
        return seen

    good, stale = asyncio.run(scenario())
    assert server.asked == ["/metrics"] * 3  # one request a round: the path that answered is kept
    assert (good["kind"], good["running"], good["queued"], good["stale"]) == ("vllm", 5, 0, False)
    assert good["gen_tokens_per_s"] == pytest.approx(600.0) and good["capacity_source"] == "regen's slots"
    assert stale["stale"] and "HTTP 503" in stale["error"]
    assert stale["running"] == 5 and stale["read_at"] == 1002.0  # the last reading, kept and dated


def test_a_server_with_neither_path_is_not_reported_and_asked_again_only_every_few_rounds() -> None:
    server = Figures()

    async def scenario() -> dict[str, Any]:
        async with serving(server.app()) as url, watching(url, lambda: 0.0) as watch:
            for _ in range(REDISCOVER_TICKS + 1):
                await watch.read_all()
            return watch.snapshot()[url]

    view = asyncio.run(scenario())
    assert server.asked == ["/metrics", "/v1/loads"] * 2  # the first round, then once REDISCOVER_TICKS later
    assert view["error"] == NOT_REPORTED and view["read_at"] is None and not view["stale"]
    assert summary_line("http://x", view) == f"  server http://x: {NOT_REPORTED}"
    assert NOT_REPORTED in server_lines({"http://x": view})[1]


@pytest.mark.parametrize(
    ("flags", "source"), [(["--enable-metrics"], "/metrics"), ([], "/v1/loads")], ids=["metrics", "loads"]
)
def test_the_simulator_in_process_is_read_from_metrics_or_else_loads(flags: list[str], source: str) -> None:
    async def scenario() -> dict[str, Any]:
        config = SimConfig.from_argv([*flags, "--max-running-requests", "8", "--decode-rate", "1000"])
        async with serve(config) as url, watching(url, lambda: 1.0) as watch:
            await watch.read_all()
            return watch.snapshot()[url]

    view = asyncio.run(scenario())
    assert (view["kind"], view["source"], view["running"], view["queued"]) == ("sglang", source, 0, 0)
    if source == "/v1/loads":
        assert (view["capacity"], view["capacity_source"]) == (8, "/v1/loads")
    else:
        assert (view["capacity"], view["capacity_source"]) == (16, "regen's slots")  # no preflight here


def test_the_exporter_has_a_gauge_per_figure_the_server_reports() -> None:
    exporter = Exporter("127.0.0.1", 0, worker=0)
    view = {"running": 3, "queued": 1, "capacity": 4, "kv_usage": 0.5, "gen_tokens_per_s": 900.0,
            "spec_accept_length": None, "read_at": 1.0}  # fmt: skip
    exporter.publish({"rejected_by_reason": {}, "requests": 0, "retries": 0, "endpoint_failures": 0, "total": 0,
                      "already_done": 0, "done": 0, "pending": 0, "servers": {"http://s": view}})  # fmt: skip
    samples = {(s.name, s.labels.get("endpoint")): s.value for f in exporter.collect() for s in f.samples}
    assert samples[("regen_server_running_requests", "http://s")] == 3
    assert samples[("regen_server_queued_requests", "http://s")] == 1
    assert samples[("regen_server_capacity", "http://s")] == 4
    assert samples[("regen_server_kv_usage", "http://s")] == 0.5
    assert samples[("regen_server_generation_tokens_per_s", "http://s")] == 900
    assert ("regen_server_spec_accept_length", "http://s") not in samples  # not reported: no series
    assert samples[("regen_server_reading_age_seconds", "http://s")] > 0
