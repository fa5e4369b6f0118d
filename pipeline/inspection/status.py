"""`regen status`: how far a run is, how fast it goes, and how each endpoint fares, from RUN_DIR alone.

Counts come from committed files (parquet metadata for shards, the `reason` column for rejects) plus journal rows
whose ids are not committed yet, so a run in progress is counted exactly. Rates, ETA and per-endpoint gauges come
from the runner's metrics files when they are fresh; otherwise they are derived from the rows' `created_at`.
Workers come from their heartbeats: RUN_DIR's heartbeats files, or for a run in a bucket, its worker leases.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..store import acceptance, heartbeat, repetition, row_groups
from ..store.files import DataFile, damaged_parts, reject_files, shard_files
from ..store.manifest import manifest_or_empty, simulated_endpoints
from ..store.remote import remote_of
from ..store.scan import duplicates
from . import rundir

RECENT_WINDOW_S = 60.0
FRESH_METRICS_S = 30.0
_STATUS_COLUMNS = ["id", "endpoint", "latency_s", "completion_tokens", "created_at"]


class RunStatus(TypedDict, total=False):
    """What `run_status` returns (`regen status --json`, `regen.status`), in this key order; it is built a part at
    a time, so no key is required by the type, but a finished report has all of them."""

    run_dir: str
    total: int | None
    done: int
    accepted: int
    rejected: int
    rejected_by_reason: dict[str, int]
    pending: int | None
    in_journal: int
    reject_rate: float
    simulated_endpoints: list[str]
    simulated: bool
    workers: list[dict[str, Any]]
    live_workers: int
    rates: dict[str, Any]
    last_errors: list[Any]
    eta_s: float | None
    endpoints: dict[str, dict[str, Any]]
    damaged: list[str]
    duplicates: dict[str, Any]
    servers: dict[str, dict[str, Any]]
    loops: dict[str, int]
    spec_accept_length: dict[str, Any]
    repetition: dict[str, Any]


def run_status(run_dir: Path, *, now: float | None = None) -> RunStatus:
    """Progress, rates, ETA and per-endpoint figures of a run; works while it runs and after."""
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    man = manifest_or_empty(run_dir)
    journal = _pending_journal(run_dir)
    acc = _Tally(now)
    for f in shard_files(run_dir):
        _scan_committed(f, journal, acc)
    for f in reject_files(run_dir):
        _scan_committed(f, journal, acc)
    for kind in ("accepted", "rejected"):
        acc.add_rows([e["row"] for e in journal.values() if e["kind"] == kind], rejected=kind == "rejected")
    total = rundir.total_prompts(man)
    done = acc.accepted + acc.rejected
    status: RunStatus = {
        "run_dir": str(run_dir),
        "total": total,
        "done": done,
        "accepted": acc.accepted,
        "rejected": acc.rejected,
        "rejected_by_reason": dict(acc.reasons.most_common()),
        "pending": None if total is None else max(0, total - done),
        "in_journal": len(journal),
        "reject_rate": acc.rejected / done if done else 0.0,
    }
    status["simulated_endpoints"] = simulated_endpoints(man)
    status["simulated"] = bool(status["simulated_endpoints"])  # regen's simulator wrote (some of) the rows
    status["workers"] = workers = _workers(run_dir, now)
    status["live_workers"] = sum(w["live"] for w in workers)
    dead = {w["worker"] for w in workers if not w["live"]}
    status.update(_rates(run_dir, acc, now, dead))
    if workers and not status["live_workers"]:  # a dead run has no recent rate and no ETA, whatever its rows say
        status["rates"].update(recent_completions_per_s=0.0, recent_output_tokens_per_s=0.0)
    status["eta_s"] = _eta(status)
    status["endpoints"] = acc.endpoint_table()
    status["damaged"] = [str(d) for d in damaged_parts(run_dir)]
    status["duplicates"] = duplicates(run_dir)
    _merge_metrics_endpoints(run_dir, status, now, dead)
    status["servers"] = _servers(run_dir, now)
    status["loops"] = _loops(run_dir)
    status["spec_accept_length"] = _acceptance(run_dir, journal)
    status["repetition"] = _repetition(run_dir, journal)
    return status


def _repetition(run_dir: Path, journal: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Accepted rows that keep a repetition the model ended itself (store/repetition.py): the shards and the
    journal's accepted rows not committed yet."""
    pending = repetition.row_count(e["row"] for e in journal.values() if e["kind"] == "accepted")
    return repetition.summary([*(repetition.file_count(f.path) for f in shard_files(run_dir)), pending])


def _acceptance(run_dir: Path, journal: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The server's speculative acceptance over the accepted turns so far, overall and per endpoint: the shards, and
    the journal's accepted rows not committed yet (`journal` holds only those by now). Numeric leaves only; a file's
    turns at a time (acceptance.Tally), never the run's."""
    tally = acceptance.Tally(["endpoint"])
    for f in shard_files(run_dir):
        _add_turns(tally, acceptance.file_turns(f.path))
    _add_turns(tally, acceptance.row_turns([e["row"] for e in journal.values() if e["kind"] == "accepted"]))
    return {**tally.summary(), "by_endpoint": tally.by("endpoint")}


def _add_turns(tally: acceptance.Tally, turns: acceptance.Turns) -> None:
    tally.add(turns, {"endpoint": (turns.endpoint, turns.endpoints)})


def _workers(run_dir: Path, now: float) -> list[dict[str, Any]]:
    """Each worker's last heartbeat: host, pid, its age and whether the worker is alive (store/heartbeat.py)."""
    out = []
    for index, beat in sorted(_beats(run_dir).items()):
        live, state = beat.liveness(now)
        age = max(0.0, now - beat.t)  # a beat written since `now` was read, or on a node whose clock runs ahead
        out.append({"worker": index, "host": beat.host, "pid": beat.pid, "heartbeat_age_s": round(age, 1),
                    "live": live, "state": state})  # fmt: skip
    return out


def _beats(run_dir: Path) -> dict[int, heartbeat.Beat]:
    """The heartbeats files of RUN_DIR; for a bucket run's working copy, the workers' leases in the bucket instead
    (this node's files only know this node's workers)."""
    beats = heartbeat.read_beats(run_dir)
    remote = remote_of(run_dir)
    if remote is None:
        return beats
    return {i: heartbeat.from_lease(i, holder, beats.get(i)) for i, holder in remote.worker_leases().items()}


def _worker_of(path: Path) -> int | None:
    """The worker index of a metrics file `worker-{i}.jsonl`."""
    tail = path.stem.rpartition("-")[2]
    return int(tail) if tail.isdigit() else None


class _Tally:
    """Running counts over committed and journal rows: the rates' sums as they go, and each endpoint's latencies
    (float32, 4 bytes a row: their percentiles need every value)."""

    def __init__(self, now: float) -> None:
        self.accepted = 0
        self.rejected = 0
        self.reasons: Counter[str] = Counter()
        self.rates = _RowRates(now)
        self.ep_latency: dict[str, list[np.ndarray]] = {}
        self.ep_counts: dict[str, Counter[str]] = {}

    def add_batch(self, batch: pa.RecordBatch, rejected: bool, reasons: pa.Array | None) -> None:
        n = batch.num_rows
        if rejected:
            self.rejected += n
            assert reasons is not None
            for value, count in _value_counts(reasons):
                self.reasons[value or "unknown"] += count
        else:
            self.accepted += n
        generated = _generated(reasons, n) if rejected else None  # bad_input rows were never sent: not in rates
        times = _epoch_seconds(batch.column("created_at"))
        tokens = batch.column("completion_tokens").fill_null(0).to_numpy(zero_copy_only=False)
        self.rates.add(
            times if generated is None else times[generated], tokens if generated is None else tokens[generated]
        )
        endpoints = batch.column("endpoint").fill_null("")
        latency = batch.column("latency_s").fill_null(np.nan).to_numpy(zero_copy_only=False)
        for value, _ in _value_counts(endpoints):
            mask = pc.equal(endpoints, value).to_numpy(zero_copy_only=False)
            counts = self.ep_counts.setdefault(value, Counter())
            counts["rejected" if rejected else "accepted"] += int(mask.sum())
            self.ep_latency.setdefault(value, []).append(latency[mask])

    def add_rows(self, rows: list[dict[str, Any]], rejected: bool) -> None:
        """Journal rows (plain dicts), tallied as one batch."""
        if not rows:
            return
        schema = pa.schema(
            [
                ("endpoint", pa.string()),
                ("latency_s", pa.float32()),
                ("completion_tokens", pa.int32()),
                ("created_at", pa.float64()),
            ]
        )
        values = {name: [r.get(name) for r in rows] for name in ("endpoint", "latency_s", "completion_tokens")}
        values["created_at"] = [_row_time(r.get("created_at")) for r in rows]
        batch = pa.RecordBatch.from_pydict(values, schema=schema)
        reasons = pa.array([r.get("reason") for r in rows], pa.string()) if rejected else None
        self.add_batch(batch, rejected, reasons)

    def endpoint_table(self) -> dict[str, dict[str, Any]]:
        table: dict[str, dict[str, Any]] = {}
        for url, counts in sorted(self.ep_counts.items()):
            lat = np.concatenate(self.ep_latency[url]) if self.ep_latency[url] else np.empty(0)
            lat = lat[~np.isnan(lat)]
            done = counts["accepted"] + counts["rejected"]
            table[url or "(none)"] = {
                "accepted": counts["accepted"],
                "rejected": counts["rejected"],
                "reject_rate": counts["rejected"] / done if done else 0.0,
                **{f"latency_p{q}": float(np.percentile(lat, q)) if lat.size else None for q in (50, 90, 99)},
            }
        return table


class _RowRates:
    """What the rates read of the rows' (created_at, completion_tokens), summed as the rows go by: how many have a
    time, the first and last, the tokens, and the same for those within RECENT_WINDOW_S of `now`. Token counts are
    integers, so their sums are exact whatever the order."""

    def __init__(self, now: float) -> None:
        self.since = now - RECENT_WINDOW_S
        self.rows = self.recent = 0
        self.tokens = self.recent_tokens = 0
        self.first = self.last = np.nan

    def add(self, times: np.ndarray, tokens: np.ndarray) -> None:
        ok = ~np.isnan(times)
        times, tokens = times[ok], tokens[ok]
        if not times.size:
            return
        recent = times >= self.since
        self.rows += int(times.size)
        self.recent += int(recent.sum())
        self.tokens += tokens.sum().item()
        self.recent_tokens += tokens[recent].sum().item()
        self.first = float(np.fmin(self.first, times.min()))
        self.last = float(np.fmax(self.last, times.max()))


def _generated(reasons: pa.Array | None, n: int) -> np.ndarray:
    """A mask of the rejected rows that were generated (every reason but bad_input)."""
    if reasons is None:
        return np.ones(n, dtype=bool)
    result: np.ndarray = pc.fill_null(pc.not_equal(reasons, "bad_input"), True).to_numpy(zero_copy_only=False)
    return result


def _value_counts(arr: pa.Array | pa.ChunkedArray) -> Iterable[tuple[Any, int]]:
    counts = pc.value_counts(arr)
    return zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)


def _epoch_seconds(col: pa.Array) -> np.ndarray:
    if pa.types.is_timestamp(col.type):
        us = pc.cast(col, pa.timestamp("us", tz="UTC")).cast(pa.int64())
        result: np.ndarray = us.to_numpy(zero_copy_only=False).astype(np.float64) / 1e6
        return result
    result = col.fill_null(np.nan).to_numpy(zero_copy_only=False).astype(np.float64)
    return result


def _row_time(value: Any) -> float | None:
    """A journal row's created_at: microseconds, seconds or an ISO string (whatever JSON made of it)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return value / 1e6 if value > 1e11 else float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _pending_journal(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Journal entries by id (the last entry of an id wins), before removing the committed ones."""
    entries: dict[str, dict[str, Any]] = {}
    for entry in rundir.journal_rows(run_dir):
        rid = entry["row"].get("id")
        if isinstance(rid, str):
            entries[rid] = entry
    return entries


def _scan_committed(f: DataFile, journal: dict[str, dict[str, Any]], acc: _Tally) -> None:
    """Tally one committed file and drop its ids from the journal map (they are no longer pending)."""
    pfile = pq.ParquetFile(f.path)
    columns = _STATUS_COLUMNS + (["reason"] if f.rejects else [])
    pending = pa.array(list(journal), pa.string()) if journal else None
    for batch in row_groups.iter_batches(pfile, 65536, columns):
        if pending is not None:
            hit = pc.is_in(batch.column("id"), value_set=pending)
            for rid in batch.column("id").filter(hit).to_pylist():
                journal.pop(rid, None)
        acc.add_batch(batch, f.rejects, batch.column("reason") if f.rejects else None)


def _rates(run_dir: Path, acc: _Tally, now: float, dead: set[int]) -> RunStatus:
    rows = acc.rates
    rates: dict[str, Any] = {"source": "rows", "last_row_at": rows.last if rows.rows else None}
    span = rows.last - rows.first if rows.rows > 1 else 0.0
    rates["completions_per_s"] = rows.rows / span if span > 0 else 0.0
    rates["output_tokens_per_s"] = float(rows.tokens) / span if span > 0 else 0.0
    rates["recent_completions_per_s"] = float(rows.recent) / RECENT_WINDOW_S
    rates["recent_output_tokens_per_s"] = float(rows.recent_tokens) / RECENT_WINDOW_S
    recent_metrics = _metrics_rates(run_dir, now, dead)
    if recent_metrics is not None:
        rates.update(recent_metrics, source="metrics")
    return {"rates": rates, "last_errors": _last_errors(run_dir)}


def _metrics_rates(run_dir: Path, now: float, dead: set[int]) -> dict[str, float] | None:
    """Recent rates summed over live workers whose metrics are fresh (bad_input rows, never sent, left out); None
    when no worker reports."""
    done = tokens = 0.0
    fresh = False
    for path in rundir.metrics_files(run_dir):
        if _worker_of(path) in dead:
            continue
        lines = [x for x in rundir.tail_lines(path) if isinstance(x.get("t"), int | float)]
        if not lines or now - lines[-1]["t"] > FRESH_METRICS_S:
            continue
        window = _this_process(lines[-1], [x for x in lines if x["t"] >= lines[-1]["t"] - RECENT_WINDOW_S])
        first, last = window[0], window[-1]
        dt = last["t"] - first["t"]
        if dt <= 0:
            continue
        fresh = True
        done += (_generated_count(last) - _generated_count(first)) / dt
        tokens += (last.get("output_tokens", 0) - first.get("output_tokens", 0)) / dt
    if not fresh:
        return None
    return {"recent_completions_per_s": done, "recent_output_tokens_per_s": tokens}


def _this_process(last: dict[str, Any], window: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The window's lines written by the process that wrote `last`: a worker restarted (after a kill, a crash) writes
    to the same file with its counters from zero, and a rate across the two would be negative. Lines carry the
    process's start time (`started`); older lines without it are cut at the last counter that went down."""
    if "started" in last:
        return [x for x in window if x.get("started") == last["started"]]
    start = 0
    for i in range(1, len(window)):
        if _generated_count(window[i]) < _generated_count(window[i - 1]):
            start = i
    return window[start:]


def _generated_count(line: dict[str, Any]) -> int:
    """Rows a metrics line counts as finished, less the bad_input ones (refused, never sent)."""
    return int(line.get("done", 0)) - int((line.get("rejected_by_reason") or {}).get("bad_input", 0))


def _last_errors(run_dir: Path, keep: int = 10) -> list[Any]:
    errors: list[tuple[float, Any]] = []
    for path in rundir.metrics_files(run_dir):
        lines = rundir.tail_lines(path, max_bytes=64 * 1024)
        if lines:
            t = lines[-1].get("t", 0)
            errors.extend((t, err) for err in lines[-1].get("last_errors") or [])
    errors.sort(key=lambda pair: pair[0])
    return [err for _, err in errors[-keep:]]


def _merge_metrics_endpoints(run_dir: Path, status: RunStatus, now: float, dead: set[int]) -> None:
    """Add the runner's live gauges (inflight, ok, errors, latency) to each endpoint's row, summed over workers; a
    dead worker's in-flight requests are nobody's, so its gauges are left out."""
    for path in rundir.metrics_files(run_dir):
        if _worker_of(path) in dead:
            continue
        lines = rundir.tail_lines(path, max_bytes=64 * 1024)
        if not lines:
            continue
        age = now - float(lines[-1].get("t", 0))
        for url, gauges in (lines[-1].get("endpoints") or {}).items():
            row = status["endpoints"].setdefault(url, {"accepted": 0, "rejected": 0})
            row["metrics_age_s"] = min(age, row.get("metrics_age_s", age))
            for key, value in (gauges or {}).items():
                if isinstance(value, int | float) and key in ("inflight", "ok", "errors"):
                    row[key] = row.get(key, 0) + value
                elif key not in row or row[key] is None:
                    row[key] = value


def _servers(run_dir: Path, now: float) -> dict[str, dict[str, Any]]:
    """What each server last said of itself (the runner's `servers` gauges, endpoints/server_view.py): of every
    worker's reading of a server, the latest (they read the same server; its figures count every client), with its
    age. A run that read none (server_view_interval_s = 0, or a run from before) has none."""
    out: dict[str, dict[str, Any]] = {}
    for path in rundir.metrics_files(run_dir):
        lines = rundir.tail_lines(path, max_bytes=64 * 1024)
        for url, view in ((lines[-1].get("servers") or {}) if lines else {}).items():
            if not isinstance(view, dict):
                continue
            at = view.get("read_at")
            if url not in out or (at or 0) > (out[url].get("read_at") or 0):
                out[url] = {**view, "age_s": None if at is None else round(max(0.0, now - at), 1)}
    return dict(sorted(out.items()))


def _loops(run_dir: Path) -> dict[str, int]:
    """Completions judged looping, generations the loop guard stopped early and the output tokens that saved, summed
    over the workers' metrics files (each worker's latest invocation)."""
    out = {"looping": 0, "stopped": 0, "tokens_saved": 0}
    for path in rundir.metrics_files(run_dir):
        lines = rundir.tail_lines(path, max_bytes=64 * 1024)
        loops = (lines[-1].get("loops") or {}) if lines else {}
        for key in out:
            out[key] += int(loops.get(key) or 0)
    return out


def _eta(status: RunStatus) -> float | None:
    pending = status["pending"]
    if pending is None:
        return None
    if pending == 0:
        return 0.0
    rate = status["rates"]["recent_completions_per_s"]
    if status["workers"] and not status["live_workers"]:
        return None
    return pending / rate if rate > 0 else None
