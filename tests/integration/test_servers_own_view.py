"""Issue 37, the servers' own view: while a run lives, `regen status` and the run's Prometheus endpoint show what each
server says of itself, and the summary gives each server's mean throughput and occupancy. The real CLI over HTTP
against simulators decoding at a real rate (one with `--enable-metrics`, read from /metrics; one without, read from
/v1/loads), and against a stand-in for vLLM whose /metrics counts what it serves (and one with no /metrics: "not
reported")."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from pipeline.endpoints.server_view import NOT_REPORTED
from pipeline.inspection import run_status
from tests.helpers import SIM_FLAGS, wait_until, write_prompts
from tests.helpers.exactly_once import read_rows
from tests.helpers.fake_vllm import MODEL, FakeVllm, serve
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen

DECODE = 3000  # tok/s of a full batch: each simulator's throughput while its 4 slots are busy
BUSY = (*SIM_FLAGS, "--decode-rate", str(DECODE), "--max-running-requests", "4")


def _config(
    tmp_path: Path, urls: list[str], *, model: str = "Qwen3.6-27B", max_tokens: int = 4096, port: int = 0
) -> Path:
    endpoints = "".join(f'[[endpoints]]\nurl = "{url}"\nconcurrency = 8\n' for url in urls)
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[input]
path = "{tmp_path / "prompts.jsonl"}"
[output]
dir = "{tmp_path / "run"}"
sync_interval_s = 0.2
metrics_port = {port}
metrics_linger_s = 0
[generation]
model = "{model}"
max_tokens = {max_tokens}
[client]
backoff_base_s = 0.01
backoff_max_s = 0.05
server_view_interval_s = 0.1
{endpoints}"""
    )
    return cfg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, str], float]:
    """The run's gauges by (name, endpoint); empty while the exporter is not up."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    return {
        (s.name, s.labels.get("endpoint", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _busy_view(run_dir: Path, urls: list[str]) -> dict[str, Any] | None:
    """`regen status`'s servers once every server's latest reading shows its batch full (4 running), else None."""
    if not (run_dir / "run.json").exists():
        return None
    servers = run_status(run_dir)["servers"]
    return servers if all(servers.get(url, {}).get("running") == 4 for url in urls) else None


def _busy_gauges(port: int, urls: list[str]) -> dict[tuple[str, str], float] | None:
    """The run's gauges once they show every server's batch full, else None."""
    gauges = _scrape(port)
    return gauges if all(gauges.get(("regen_server_running_requests", url)) == 4 for url in urls) else None


def test_status_and_prometheus_show_each_servers_own_figures_and_the_summary_their_means(tmp_path: Path, sim) -> None:
    metered, plain = sim(*BUSY, "--enable-metrics"), sim(*BUSY)
    urls = [metered.url, plain.url]
    write_prompts(tmp_path / "prompts.jsonl", n=120)
    port = _free_port()
    cfg = _config(tmp_path, urls, port=port)
    log = tmp_path / "regen.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)  # fmt: skip
        try:
            # While both batches are full (8 sent to each 4-slot server): the view and the server's own stats agree.
            servers = wait_until(
                lambda: _busy_view(tmp_path / "run", urls), "both servers' own figures showing a full batch", alive=proc
            )
            for server, source in ((metered, "/metrics"), (plain, "/v1/loads")):
                view, stats = servers[server.url], server.stats()
                assert (view["kind"], view["source"], view["stale"]) == ("sglang", source, False)
                assert view["running"] == stats["running"] == 4  # a full batch stays full: regen keeps 8 there
                assert 0 <= view["queued"] <= 4 and 0 <= stats["queued"] <= 4  # 8 sent, 4 running
                assert view["capacity"] == 4 and view["occupancy"] == 1.0
                assert view["gen_tokens_per_s"] == pytest.approx(DECODE)  # a full batch decodes at the rate
                assert view["age_s"] < 30
            gauges = wait_until(
                lambda: _busy_gauges(port, urls), "the run's gauges showing both batches full", alive=proc
            )
            for url in urls:
                assert gauges[("regen_server_capacity", url)] == 4
                assert gauges[("regen_server_queued_requests", url)] <= 4
                assert gauges[("regen_server_kv_usage", url)] == 0.0  # the simulator's KV use: none
                assert gauges[("regen_server_generation_tokens_per_s", url)] == pytest.approx(DECODE)
            assert ("regen_server_spec_accept_length", metered.url) not in gauges  # no speculative decoding
            cli = regen("status", str(tmp_path / "run"), "--json")
            assert cli.returncode == 0 and set(orjson.loads(cli.stdout)["servers"]) == set(urls)
        finally:
            assert proc.wait(timeout=120) == 0, log.read_text()
    summary = log.read_text()
    means = {}
    for url, source, cap in ((metered.url, "/metrics", "preflight"), (plain.url, "/v1/loads", "/v1/loads")):
        line = re.search(
            rf"server {re.escape(url)} \(sglang {source}, (\d+) readings\): mean ([\d,]+) gen tok/s, "
            rf"mean occupancy (\d+)% of 4 running \({re.escape(cap)}\)", summary,
        )  # fmt: skip
        assert line, summary
        means[url] = int(line[2].replace(",", ""))
        assert int(line[1]) >= 5 and 0.5 * DECODE <= means[url] <= 1.02 * DECODE and int(line[3]) >= 50
    # The server's token counter over the run is exactly what its completions in this run hold.
    after = run_status(tmp_path / "run")["servers"][metered.url]
    tokens = sum(r["completion_tokens"] for r in read_rows(tmp_path / "run", "shards") if r["endpoint"] == metered.url)
    assert after["run"]["generation_tokens"] == tokens > 0
    assert after["run"]["mean_gen_tokens_per_s"] == pytest.approx(tokens / after["run"]["span_s"])
    assert abs(means[metered.url] - after["run"]["mean_gen_tokens_per_s"]) <= 1
    text = regen("status", str(tmp_path / "run"))
    assert "server (its own figures)" in text.stdout and "sglang /v1/loads" in text.stdout, text.stdout


@dataclass
class MeteredVllm(FakeVllm):
    """The vLLM stand-in with vLLM's own /metrics: requests running, tokens generated and, as with a draft model,
    two of every three drafted tokens accepted (names from vllm/v1/metrics/loggers.py and spec_decode/metrics.py)."""

    running: int = 0
    generated: int = 0

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.running += 1
        try:
            response = await super()._chat(request)
        finally:
            self.running -= 1
        reasoning, content, _ = self.replies.get("", ("Let me think. 2 + 2 = 4.", "4", "stop"))
        self.generated += (len(reasoning or "") + len(content)) // 4 + 1  # as FakeVllm counts a reply's tokens
        return response

    async def _metrics(self, _: web.Request) -> web.Response:
        label = f'{{engine="0",model_name="{MODEL}"}}'
        drafts = self.generated // 3
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{label} {float(self.running)}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{label} 0.0",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{label} {self.running / 100}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{label} {float(self.generated)}",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f"vllm:spec_decode_num_drafts_total{label} {float(drafts)}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f"vllm:spec_decode_num_accepted_tokens_total{label} {float(2 * drafts)}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def test_a_vllm_server_is_read_from_its_metrics_and_one_without_is_not_reported(tmp_path: Path) -> None:
    metered, bare = MeteredVllm(delay_s=0.01, chunk=4), FakeVllm(delay_s=0.01, chunk=4)
    write_prompts(tmp_path / "prompts.jsonl", n=60)
    with serve(metered) as url, serve(bare) as other:
        result = regen("run", str(_config(tmp_path, [url, other], model=MODEL, max_tokens=2048)), "--no-progress")
        assert result.returncode == 0, result.stderr
        servers = run_status(tmp_path / "run")["servers"]
    view = servers[url]
    assert (view["kind"], view["source"], view["running"], view["queued"]) == ("vllm", "/metrics", 0, 0)
    assert view["capacity"] == 8 and view["capacity_source"] == "regen's slots"  # vLLM reports no batch size
    # Its counter rose by what this run's completions there hold (preflight's probe came before the first reading).
    tokens = sum(r["completion_tokens"] for r in read_rows(tmp_path / "run", "shards") if r["endpoint"] == url)
    assert view["run"]["generation_tokens"] == tokens > 0 and metered.generated > tokens
    assert view["run"]["readings"] >= 2 and view["run"]["mean_occupancy"] is not None
    assert view["spec_accept_length"] == pytest.approx(3.0, abs=0.1)  # 1 + 2 accepted per draft
    assert servers[other]["error"] == NOT_REPORTED and servers[other]["read_at"] is None
    assert f"server {other}: {NOT_REPORTED}" in result.stderr
    assert re.search(rf"server {re.escape(url)} \(vllm /metrics, \d+ readings\): mean [\d,]+ gen tok/s", result.stderr)
