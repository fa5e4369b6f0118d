"""Prometheus metrics of one run, served at http://HOST:PORT/metrics while it lives (`output.metrics_port`).

The runner publishes a snapshot of its counters about twice a second (the same snapshot the progress bar and
RUN_DIR/metrics/ get); a scrape reads the last one, on the server's own thread, and never touches the event loop
or the hot path. Every metric is built from that snapshot at scrape time on a registry of this run's own (never
the process-wide default one), so several runs in one process, as in tests, each serve their own. Names and labels
are documented in docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..endpoints.state import DEGRADED, DOWN, DRAINING, HEALTHY, RETIRED
from ..errors import ConfigError

log = logging.getLogger("regen.run")
STATES = (HEALTHY, DEGRADED, DOWN, DRAINING, RETIRED)
SERVER_GAUGES = (  # each server's own figures, as its /metrics or /v1/loads gave them (docs/metrics.md)
    ("regen_server_running_requests", "running", "requests the server is running, every client's"),
    ("regen_server_queued_requests", "queued", "requests waiting in the server's queue"),
    (
        "regen_server_capacity",
        "capacity",
        "requests the server runs at once (what it or preflight says, else regen's slots)",
    ),
    ("regen_server_kv_usage", "kv_usage", "the server's KV-cache use, 0 to 1"),
    ("regen_server_generation_tokens_per_s", "gen_tokens_per_s", "the server's generation throughput, tokens/s"),
    ("regen_server_spec_accept_length", "spec_accept_length", "the server's mean speculative accept length"),
)


class Exporter(Collector):
    def __init__(self, host: str, port: int, *, worker: int = 0):
        self.host, self.port, self.worker = host, port, str(worker)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._snap: dict[str, Any] | None = None
        self._finished = False
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> None:
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"output.metrics_port: cannot serve metrics on {self.host}:{self.port}: {exc}") from None
        self.port = self._server.server_port

    @asynccontextmanager
    async def serving(self, linger_s: float) -> AsyncIterator[None]:
        """Serve /metrics for the length of the run when a port is set, and `linger_s` longer after a run that ended
        without an error: a last scrape sees the final counts."""
        if not self.port:
            yield
            return
        self.start()
        log.info("metrics at %s", self.url, extra={"event": "metrics", "url": self.url})
        try:
            yield
            await asyncio.sleep(linger_s)
        finally:
            self.stop()

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None

    def publish(self, snap: dict[str, Any], *, finished: bool = False) -> None:
        """The snapshot scrapes will read (built on the event loop and never changed after: replaced whole)."""
        self._snap, self._finished = snap, finished

    def collect(self) -> Iterator[Metric]:
        snap = self._snap
        yield _gauge("regen_run_finished", "1 once this run has ended", [], [([], float(self._finished))], self.worker)
        if snap is None:
            return
        yield from self._run_metrics(snap)
        yield from self._endpoint_metrics(snap.get("endpoints", {}))
        yield from self._server_metrics(snap.get("servers") or {})
        commit = snap.get("commit_seconds")
        if commit:
            yield self._histogram("regen_commit_seconds", "journal sync (fsync and shard commits), seconds", commit)
        yield from self._spec_metrics(snap)

    def _run_metrics(self, s: dict[str, Any]) -> Iterator[Metric]:
        w = self.worker
        by_endpoint = s.get("completions_by_endpoint", {})
        tokens = s.get("output_tokens_by_endpoint", {})
        yield _counter(
            "regen_completions",
            "accepted completions stored",
            ["endpoint"],
            [([e], n) for e, n in by_endpoint.items()],
            w,
        )
        yield _counter(
            "regen_output_tokens", "completion tokens of accepted completions", ["endpoint"],
            [([e], n) for e, n in tokens.items()], w,
        )  # fmt: skip
        yield _counter(
            "regen_rejects", "prompts rejected, by reason", ["reason"],
            [([r], n) for r, n in s["rejected_by_reason"].items()], w,
        )  # fmt: skip
        yield _counter("regen_requests", "generation requests sent", [], [([], s["requests"])], w)
        yield _counter(
            "regen_retries", "requests retried after a 5xx, timeout or bad response", [], [([], s["retries"])], w
        )
        yield _counter(
            "regen_endpoint_failures", "requests lost to an endpoint going down", [], [([], s["endpoint_failures"])], w
        )
        yield _counter(
            "regen_later_turns", "accepted turns after a conversation's first", [], [([], s.get("later_turns", 0))], w
        )
        yield _counter(
            "regen_later_turns_same_endpoint",
            "later turns served by the endpoint of the turn before (prefix cache reuse)",
            [],
            [([], s.get("later_turns_same_endpoint", 0))],
            w,
        )
        loops = s.get("loops") or {}
        yield _counter(
            "regen_looping_completions",
            "completions judged looping (resampled)",
            [],
            [([], loops.get("looping", 0))],
            w,
        )
        yield _counter(
            "regen_loops_stopped",
            "generations stopped early for looping (the stream guard aborted them on the server)",
            [],
            [([], loops.get("stopped", 0))],
            w,
        )
        yield _counter(
            "regen_loop_tokens_saved",
            "output tokens not generated because the loop guard stopped a generation (max_tokens less what streamed)",
            [],
            [([], loops.get("tokens_saved", 0))],
            w,
        )
        yield _gauge("regen_prompts_owned", "prompts this worker owns in the input", [], [([], s["total"])], w)
        yield _gauge(
            "regen_prompts_finished", "prompts in shards or rejects", [], [([], s["already_done"] + s["done"])], w
        )
        yield _gauge("regen_prompts_pending", "prompts not finished yet", [], [([], s["pending"])], w)
        yield _gauge("regen_queue_depth", "prompts read and waiting for a slot", [], [([], s.get("queue_depth", 0))], w)

    def _endpoint_metrics(self, endpoints: dict[str, dict[str, Any]]) -> Iterator[Metric]:
        w = self.worker
        for name, key, doc in (
            ("regen_endpoint_inflight", "inflight", "requests in flight"),
            ("regen_endpoint_capacity", "capacity", "requests this worker may have in flight"),
        ):
            yield _gauge(name, doc, ["endpoint"], [([url], ep[key]) for url, ep in endpoints.items()], w)
        states = [([url, st], float(ep["state"] == st)) for url, ep in endpoints.items() for st in STATES]
        yield _gauge("regen_endpoint_state", "1 for the endpoint's current state", ["endpoint", "state"], states, w)
        for name, key, doc in (
            ("regen_endpoint_responses", "ok", "requests answered"),
            ("regen_endpoint_errors", "errors", "requests failed"),
        ):
            yield _counter(name, doc, ["endpoint"], [([url], ep[key]) for url, ep in endpoints.items()], w)

    def _server_metrics(self, servers: dict[str, dict[str, Any]]) -> Iterator[Metric]:
        """What each server says of itself (endpoints/server_view.py); a figure it does not report has no series."""
        for name, key, doc in SERVER_GAUGES:
            values = [([url], float(v[key])) for url, v in servers.items() if v.get(key) is not None]
            yield _gauge(name, doc, ["endpoint"], values, self.worker)
        now = time.time()
        ages = [([url], max(0.0, now - v["read_at"])) for url, v in servers.items() if v.get("read_at") is not None]
        yield _gauge("regen_server_reading_age_seconds", "seconds since the server last gave its figures", ["endpoint"],
                     ages, self.worker)  # fmt: skip

    def _spec_metrics(self, s: dict[str, Any]) -> Iterator[Metric]:
        """The serving model's speculative acceptance of the stored turns, per endpoint (only those that report it)."""
        w = self.worker
        hists = s.get("spec_accept_length") or {}
        family = HistogramMetricFamily(
            "regen_spec_accept_length",
            "the server's speculative acceptance per stored turn: tokens per verify step, the bonus token included",
            labels=["worker", "endpoint"],
        )
        for url, h in hists.items():
            family.add_metric([w, url], _buckets(h), h["sum"])
        yield family
        for name, key, doc in (
            ("regen_spec_verify_steps", "spec_verify_steps", "verify steps of the stored turns that report acceptance"),
            (
                "regen_spec_tokens",
                "spec_tokens",
                "completion tokens of those turns (tokens / steps: weighted acceptance)",
            ),
        ):
            yield _counter(name, doc, ["endpoint"], [([url], n) for url, n in (s.get(key) or {}).items()], w)

    def _histogram(self, name: str, doc: str, h: dict[str, Any]) -> Metric:
        family = HistogramMetricFamily(name, doc, labels=["worker"])
        family.add_metric([self.worker], _buckets(h), h["sum"])
        return family


def _buckets(h: dict[str, Any]) -> list[tuple[str, float]]:
    """A snapshot's per-bucket counts (metrics.Latencies) as Prometheus' cumulative `le` buckets."""
    cumulative, buckets = 0, []
    for bound, count in zip([*h["buckets"], float("inf")], h["counts"], strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
    return buckets


def _counter(name: str, doc: str, labels: list[str], values: list[tuple[list[str], float]], worker: str) -> Metric:
    family = CounterMetricFamily(name, doc, labels=["worker", *labels])
    for label_values, value in values:
        family.add_metric([worker, *label_values], value)
    return family


def _gauge(
    name: str, doc: str, labels: list[str], values: list[tuple[list[str], float]], worker: str | None = None
) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=(["worker"] if worker is not None else []) + labels)
    for label_values, value in values:
        family.add_metric(([worker] if worker is not None else []) + label_values, value)
    return family
