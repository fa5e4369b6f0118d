"""What each server says of itself while a run lives: its running and queued requests against its capacity, its
KV-cache use, its generation throughput and its mean speculative accept length, so a user sees whether the GPUs are
the bottleneck (regen's own counters say only what regen sent).

Every `client.server_view_interval_s` (0: off) the watch reads each live endpoint once, over its control-plane
connections (never behind a generation), and keeps the latest reading per server:

- SGLang, `GET /metrics` (only with `--enable-metrics`; `observability/metrics_collector.py`): the gauges
  `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage` (KV use, 0..1), `sglang:gen_throughput`
  (tok/s over SGLang's last decode log interval), `sglang:spec_accept_length`, `sglang:max_total_num_tokens`, and
  the counter `sglang:generation_tokens_total`.
- SGLang without `--enable-metrics` (`/metrics` is a 404): `GET /v1/loads` (>= 0.5.9, `entrypoints/v1_loads.py`),
  per DP rank `num_running_reqs`, `num_waiting_reqs`, `max_running_requests`, `token_usage`, `gen_throughput` and
  `speculative.accept_length`.
- vLLM, `GET /metrics` (`vllm/v1/metrics/loggers.py`, `vllm/v1/spec_decode/metrics.py`): `vllm:num_requests_running`,
  `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (before 0.9 `vllm:gpu_cache_usage_perc`), and counters:
  the throughput is the rise of `vllm:generation_tokens_total` between two readings, the accept length
  1 + the rise of `vllm:spec_decode_num_accepted_tokens_total` over that of `vllm:spec_decode_num_drafts_total`.
- Anything else (a server with neither, a gateway): "not reported", asked again every `REDISCOVER_TICKS` intervals.

A server's capacity is what it says now (`/v1/loads` `max_running_requests`), else what preflight learned
(`effective_max_running_requests`), else the slots regen may use there (the pool's capacity, which is all a vLLM
server's figures allow). A failed read never touches the run: a debug line, and the view keeps its last reading,
marked stale. Over the run each view keeps the means the summary reports: the generation throughput (the rise of
the token counter over the readings' span where there is one, else the mean of the readings) and the occupancy
(running / capacity, averaged over the readings taken while the run generated).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from ..errors import RegenError
from .pool import Pool
from .state import LIVE, EndpointState
from .transport import Timeouts

log = logging.getLogger("regen.endpoints")

METRICS_PATH = "/metrics"
LOADS_PATH = "/v1/loads"
# A read never takes longer, whatever the interval: a busy server's /metrics can take longer than a short interval
# (a real vLLM on 2 CPU cores, generating, answered in over 0.1 s), and rounds never overlap (the next waits).
READ_TIMEOUT_S = 5.0
REDISCOVER_TICKS = 6  # a server that reported nothing is asked again every this many intervals
NOT_REPORTED = "not reported (no /metrics, no /v1/loads)"

# The samples read from each server kind's /metrics, by what they are in a reading.
SGLANG = {
    "running": "sglang:num_running_reqs",
    "queued": "sglang:num_queue_reqs",
    "kv_usage": "sglang:token_usage",
    "gen_tokens_per_s": "sglang:gen_throughput",
    "spec_accept_length": "sglang:spec_accept_length",
    "max_total_tokens": "sglang:max_total_num_tokens",
    "generation_tokens": "sglang:generation_tokens_total",
}
VLLM = {
    "running": "vllm:num_requests_running",
    "queued": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "kv_usage_old": "vllm:gpu_cache_usage_perc",
    "generation_tokens": "vllm:generation_tokens_total",
    "spec_accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "spec_drafts": "vllm:spec_decode_num_drafts_total",
}
_WANTED = {name: (kind, key) for kind, names in (("sglang", SGLANG), ("vllm", VLLM)) for key, name in names.items()}
_MEANS = frozenset({"kv_usage", "kv_usage_old", "spec_accept_length"})  # per DP rank or engine: averaged, not summed
_PREFIXES = tuple(_WANTED)


@dataclass(frozen=True)
class Reading:
    """One answer of one server, its figures as it gave them (None: not in that answer)."""

    kind: str  # "sglang" or "vllm"
    source: str  # the path that answered
    at: float  # wall clock
    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = None
    gen_tokens_per_s: float | None = None  # as the server gives it (SGLang); vLLM's comes from its counter
    spec_accept_length: float | None = None
    max_running: int | None = None  # /v1/loads only
    max_total_tokens: float | None = None
    generation_tokens: float | None = None  # counters
    spec_accepted: float | None = None
    spec_drafts: float | None = None


def parse_metrics(text: str, at: float) -> Reading | None:
    """A Prometheus /metrics body as a reading: SGLang's or vLLM's names, summed over label sets (DP ranks, engines;
    KV use and accept length averaged). None when it holds neither kind's running requests.

    Only the wanted samples' lines are parsed (a server's /metrics runs to hundreds of histogram lines); without
    their `# TYPE` lines each parses as an untyped sample under its own full name."""
    lines = [line for line in text.splitlines() if line.startswith(_PREFIXES)]
    found: dict[str, dict[str, list[float]]] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            if (hit := _WANTED.get(sample.name)) is not None:
                kind, key = hit
                found.setdefault(kind, {}).setdefault(key, []).append(float(sample.value))
    for kind in ("sglang", "vllm"):
        samples = found.get(kind, {})
        if "running" not in samples:
            continue
        values: dict[str, Any] = {k: sum(v) / len(v) if k in _MEANS else sum(v) for k, v in samples.items()}
        old_kv = values.pop("kv_usage_old", None)
        values.setdefault("kv_usage", old_kv)
        if not values.get("spec_accept_length"):  # SGLang reports 0 without speculative decoding
            values.pop("spec_accept_length", None)
        return Reading(kind=kind, source=METRICS_PATH, at=at, **values)
    return None


def parse_loads(body: Any, at: float) -> Reading | None:
    """SGLang's /v1/loads body (one entry per DP rank) as a reading; None when it is not that shape."""
    ranks = body.get("loads") if isinstance(body, dict) else None
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, dict) for r in ranks):
        return None

    def total(key: str) -> float | None:
        values = [r[key] for r in ranks if isinstance(r.get(key), int | float)]
        return float(sum(values)) if values else None

    usage = [r["token_usage"] for r in ranks if isinstance(r.get("token_usage"), int | float)]
    spec = [r["speculative"].get("accept_length") for r in ranks if isinstance(r.get("speculative"), dict)]
    accept = [float(a) for a in spec if isinstance(a, int | float) and a > 0]
    max_running = total("max_running_requests")
    return Reading(
        kind="sglang",
        source=LOADS_PATH,
        at=at,
        running=total("num_running_reqs"),
        queued=total("num_waiting_reqs"),
        kv_usage=sum(usage) / len(usage) if usage else None,
        gen_tokens_per_s=total("gen_throughput"),
        spec_accept_length=sum(accept) / len(accept) if accept else None,
        max_running=int(max_running) if max_running else None,
        max_total_tokens=total("num_total_tokens"),
    )


def _rise(now: float | None, before: float | None) -> float | None:
    """How much a counter rose (None: unknown, or it went back: the server restarted)."""
    if now is None or before is None or now < before:
        return None
    return now - before


def _accept_length(reading: Reading, before: Reading | None) -> float | None:
    """vLLM's mean accept length from its counters, the bonus token included: over the interval since `before`,
    or over the server's life when nothing was drafted since (or there is no reading before)."""
    drafts = _rise(reading.spec_drafts, before.spec_drafts) if before is not None else None
    if drafts and before is not None:
        return 1 + (_rise(reading.spec_accepted, before.spec_accepted) or 0.0) / drafts
    if reading.spec_drafts:
        return 1 + (reading.spec_accepted or 0.0) / reading.spec_drafts
    return None


class ServerView:
    """One server as the run saw it: the latest reading and what follows from it and the one before, and the means
    over the run."""

    def __init__(self, url: str, interval_s: float = 0.0):
        self.url = url
        self.interval_s = interval_s  # how often it is read, for reports
        self.path: str | None = None  # the path that answers, once one has
        self.latest: Reading | None = None
        self.first: Reading | None = None  # the first reading with a token counter: the run's throughput span
        self.error: str | None = None  # why the last read failed (the view is stale), or "not reported"
        self.skip = 0  # intervals to wait before asking a server that reported nothing again
        self.capacity: int | None = None
        self.capacity_source: str | None = None
        self.gen_tokens_per_s: float | None = None
        self.spec_accept_length: float | None = None
        self.readings = 0
        self.samples = 0  # readings taken while the run generated
        self._tps: list[float] = []
        self._occupancy: list[float] = []

    def take(self, reading: Reading, capacity: tuple[int | None, str | None], *, sample: bool = True) -> None:
        """A new reading. `sample`: taken while the run generates, so it counts in the run's means of the readings
        (the first reading, taken as the run starts, and the last, after its last generation, only bound the span
        of the token counter)."""
        before, self.latest, self.error = self.latest, reading, None
        self.capacity, self.capacity_source = (reading.max_running, LOADS_PATH) if reading.max_running else capacity
        comparable = before if before is not None and before.kind == reading.kind else None
        self.gen_tokens_per_s = reading.gen_tokens_per_s
        if self.gen_tokens_per_s is None and comparable is not None and reading.at > comparable.at:
            tokens = _rise(reading.generation_tokens, comparable.generation_tokens)
            self.gen_tokens_per_s = None if tokens is None else tokens / (reading.at - comparable.at)
        self.spec_accept_length = reading.spec_accept_length or _accept_length(reading, comparable)
        if reading.generation_tokens is not None and (self.first is None or self.first.kind != reading.kind):
            self.first = reading
        self.readings += 1
        if not sample:
            return
        self.samples += 1
        if self.gen_tokens_per_s is not None:
            self._tps.append(self.gen_tokens_per_s)
        if reading.running is not None and self.capacity:
            self._occupancy.append(reading.running / self.capacity)

    def failed(self, why: str) -> None:
        self.error = why

    def not_reported(self) -> None:
        self.path, self.error, self.skip = None, NOT_REPORTED, REDISCOVER_TICKS - 1

    def run_figures(self) -> dict[str, Any]:
        """Over the run: the tokens the server generated between the first and the last reading (every client's: its
        counter's rise) and that span, the mean throughput (that rise over the span; without a counter, the mean of
        the readings) and the mean occupancy."""
        first, last = self.first, self.latest
        rise = span = None
        if first is not None and last is not None and last.kind == first.kind and last.at > first.at:
            rise, span = _rise(last.generation_tokens, first.generation_tokens), last.at - first.at
        mean: float | None = rise / span if rise is not None and span else None
        if mean is None and self._tps:
            mean = sum(self._tps) / len(self._tps)
        return {
            "readings": self.readings,
            "samples": self.samples,
            "interval_s": self.interval_s,
            "mean_gen_tokens_per_s": mean,
            "mean_occupancy": sum(self._occupancy) / len(self._occupancy) if self._occupancy else None,
            "generation_tokens": rise,
            "span_s": span if rise is not None else None,
        }

    def as_json(self) -> dict[str, Any]:
        r = self.latest
        occupancy = r.running / self.capacity if r is not None and r.running is not None and self.capacity else None
        return {
            "kind": r.kind if r else None,
            "source": r.source if r else None,
            "read_at": r.at if r else None,
            "stale": self.error is not None and r is not None,
            "error": self.error,
            "running": _count(r.running) if r else None,
            "queued": _count(r.queued) if r else None,
            "capacity": self.capacity,
            "capacity_source": self.capacity_source,
            "occupancy": occupancy,
            "kv_usage": r.kv_usage if r else None,
            "max_total_tokens": r.max_total_tokens if r else None,
            "gen_tokens_per_s": self.gen_tokens_per_s,
            "spec_accept_length": self.spec_accept_length,
            "run": self.run_figures(),
        }


def _count(x: float | None) -> int | float | None:
    """A number of requests as the integer it is (Prometheus text gives every value as a float)."""
    return int(x) if x is not None and x == int(x) else x


Advertised = Callable[[str], int | None]  # what preflight learned of a server's capacity (None: nothing)


class ServerWatch:
    """Reads every live endpoint's own figures every `interval_s`, one small control-plane request each."""

    def __init__(
        self,
        pool: Pool,
        *,
        interval_s: float,
        advertised: Advertised = lambda url: None,
        clock: Callable[[], float] = time.time,
    ):
        self.pool = pool
        self.interval_s = interval_s
        self.advertised = advertised
        self.clock = clock
        self.views: dict[str, ServerView] = {}

    async def run(self) -> None:
        while True:
            await self.read_all()
            await asyncio.sleep(self.interval_s)

    async def read_all(self, *, final: bool = False, timeout_s: float | None = None) -> None:
        """Read every live endpoint once, at once (a slow one holds up this round by its timeout at most)."""
        timeout = READ_TIMEOUT_S if timeout_s is None else timeout_s
        live = [ep for ep in self.pool.endpoints if ep.state in LIVE]
        await asyncio.gather(*(self.read(ep, timeout, final=final) for ep in live))

    async def read(self, ep: EndpointState, timeout_s: float, *, final: bool = False) -> None:
        view = self.views.get(ep.url) or self.views.setdefault(ep.url, ServerView(ep.url, self.interval_s))
        if view.skip > 0 and not final:
            view.skip -= 1
            return
        try:
            reading = await self._ask(ep, view, timeout_s)
        except RegenError as exc:
            log.debug("%s: its own figures were not read: %s", ep.url, exc, extra={"event": "server_view_failed"})
            view.failed(str(exc))
            return
        if reading is None:
            view.not_reported()
            return
        view.take(reading, self._capacity(ep), sample=not final and view.latest is not None)

    async def _ask(self, ep: EndpointState, view: ServerView, timeout_s: float) -> Reading | None:
        """The first path that answers with figures (the one that did last time first); None when none does."""
        timeouts = Timeouts(connect=min(ep.client.cfg.connect_timeout_s, timeout_s), total=timeout_s)
        paths = [view.path] if view.path else [METRICS_PATH, LOADS_PATH]
        for path in paths:
            reply = await ep.client.control.request("GET", path, timeouts=timeouts)
            if reply.status == 404:
                continue
            if not 200 <= reply.status < 300:
                raise RegenError(f"{ep.url}{path}: HTTP {reply.status}")
            reading = _parse(path, reply.body, self.clock())
            if reading is not None:
                view.path = path
                return reading
        if view.path is not None:  # the path that answered before no longer does (a restart): look again next time
            view.path = None
            raise RegenError(f"{ep.url}{paths[0]}: no figures any more")
        return None

    def _capacity(self, ep: EndpointState) -> tuple[int | None, str | None]:
        advertised = self.advertised(ep.url)
        if advertised:
            return advertised, "preflight"
        return ep.capacity, "regen's slots"

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {url: view.as_json() for url, view in self.views.items()}


def _parse(path: str, body: bytes, at: float) -> Reading | None:
    """A body as a reading; None when it holds no figures regen knows (or is not Prometheus text or JSON)."""
    try:
        if path == METRICS_PATH:
            return parse_metrics(body.decode("utf-8", "replace"), at)
        return parse_loads(orjson.loads(body), at)
    except ValueError:  # prometheus_client's parser on a malformed line; orjson.JSONDecodeError is one too
        return None


def summary_line(url: str, view: dict[str, Any]) -> str:
    """One server's means over the run, for the run summary."""
    run = view.get("run") or {}
    if not run.get("readings"):
        return f"  server {url}: {view.get('error') or 'no reading'}"
    tps, occupancy = run.get("mean_gen_tokens_per_s"), run.get("mean_occupancy")
    unsampled = f"no reading while the run generated (one every {run.get('interval_s'):g}s)"
    figures = [] if tps is None else [f"mean {tps:,.0f} gen tok/s"]
    if occupancy is not None:
        figures.append(
            f"mean occupancy {occupancy:.0%} of {view.get('capacity')} running ({view.get('capacity_source')})"
        )
    else:
        figures.append(unsampled if not run.get("samples") else "occupancy not reported")
    return f"  server {url} ({view.get('kind')} {view.get('source')}, {run['readings']} readings): {', '.join(figures)}"
