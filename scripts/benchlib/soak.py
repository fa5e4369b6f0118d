"""The soak at real durations, compressed (issue 17): four 64-slot servers (one restarts, one freezes, one bursts
503) shared by two workers with automatic concurrency, and the figures read from what was sampled and stored."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pyarrow.compute as pc
import pyarrow.dataset as pds

from benchlib import ROOT, Sim, ids_and_shard_sizes, write_prompts


class SoakPlan:
    """The real job's shape, compressed `time_factor` times: every duration and timeout below is real / factor."""

    def __init__(self, minutes: float, time_factor: float, tok_s: float = 60.0, tokens: int = 1800, slots: int = 64):
        self.minutes, self.factor, self.tokens, self.slots = minutes, time_factor, tokens, slots
        self.request_s = tokens / tok_s / time_factor  # a mean request at a full batch (30 s real at 60 tok/s)
        self.decode_rate = slots * tok_s * time_factor  # a full batch decodes at tok_s per request, compressed
        self.prompts = int(4 * slots / self.request_s * minutes * 60)  # four healthy servers' worth of the span
        self.down_at = 0.3 * minutes * 60  # the restart, the freeze and the bursts, in compressed seconds
        self.freeze_at = 0.55 * minutes * 60

    def real(self, seconds: float) -> float:
        return seconds / self.factor

    def client_toml(self) -> str:
        """The defaults of every client timeout and interval, scaled; automatic concurrency (fair shares)."""
        keys = {
            "request_timeout_s": 3600, "connect_timeout_s": 10, "stall_timeout_s": 120, "hang_floor_s": 600,
            "backoff_base_s": 0.5, "backoff_max_s": 30, "drain_timeout_s": 30, "health_interval_s": 10,
            "health_timeout_s": 20, "recheck_interval_s": 60, "no_endpoint_timeout_s": 600, "sticky_wait_s": 5,
        }  # fmt: skip
        return "[client]\n" + "".join(f"{k} = {self.real(v):g}\n" for k, v in keys.items())

    def sim_args(self, i: int) -> list[str]:
        args = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--seed", str(i)]
        args += ["--max-running-requests", str(self.slots), "--decode-rate", f"{self.decode_rate:g}"]
        args += ["--mean-output-tokens", str(self.tokens)]
        args += ["--disconnect-check", f"{self.real(4):g}"]  # SGLang sees a gone client only after 4 s of no output
        if i == 1:  # restarts with the same args: 2 minutes down (weights), then 30 s of /health 503
            down_after = int(self.slots / self.request_s * self.down_at)
            args += [
                "--down-after",
                str(down_after),
                "--down-for",
                f"{self.real(120):g}",
                "--warmup",
                f"{self.real(30):g}",
            ]
        if i == 3:  # bursts of 503: 30 s of refusals every 5 minutes
            args += ["--fail-503-every", f"{self.real(300):g}", "--fail-503-for", f"{self.real(30):g}"]
        return args


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _SoakWatch:
    """Samples each server's /health and /v1/loads (4 Hz), the workers' request counters (Prometheus, 2 Hz) and
    their RSS (every 2 s), from a thread, until stopped."""

    def __init__(self, sims: list[Sim], workers: list[subprocess.Popen[bytes]], metrics_urls: list[str]):
        import threading

        self.sims, self.workers, self.metrics_urls = sims, workers, metrics_urls
        self.loads: list[tuple[float, int, bool, int, int]] = []  # (t, server, healthy, running, max_running)
        self.rss: list[tuple[float, int, float]] = []  # (t, worker, MB)
        self.requests, self.last_dispatch, self.last_dispatch_wall = 0, time.monotonic(), time.time()
        self.sent: dict[str, int] = {}  # generation requests each worker has sent (its Prometheus counter)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _server(self, client: httpx.Client, i: int, t: float) -> None:
        try:
            healthy = client.get(f"{self.sims[i].url}/health").status_code == 200
            [load] = client.get(f"{self.sims[i].url}/v1/loads").json()["loads"]
            self.loads.append((t, i, healthy, load["num_running_reqs"], load["max_running_requests"]))
        except (httpx.HTTPError, OSError, ValueError):
            self.loads.append((t, i, False, 0, 1))  # down, or frozen (no answer within the timeout)

    def _counters(self, client: httpx.Client) -> None:
        for url in self.metrics_urls:
            try:
                text = client.get(url).text
            except (httpx.HTTPError, OSError):
                continue  # a worker not serving yet, or gone: its last reading stands
            counts = [int(float(line.split()[-1])) for line in text.splitlines() if line.startswith("regen_requests")]
            self.sent[url] = max(self.sent.get(url, 0), sum(counts))
        total = sum(self.sent.values())
        if total > self.requests:
            self.requests, self.last_dispatch, self.last_dispatch_wall = total, time.monotonic(), time.time()

    def _loop(self) -> None:
        tick = 0
        with httpx.Client(timeout=0.5) as client:
            while not self._stop.wait(0.25):
                t = time.monotonic()
                for i in range(len(self.sims)):
                    self._server(client, i, t)
                if tick % 2 == 0:
                    self._counters(client)
                if tick % 8 == 0:
                    self.rss += [(t, w, _rss_mb(p.pid)) for w, p in enumerate(self.workers) if p.poll() is None]
                tick += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0.0


def _freeze(sim: Sim, at_s: float, for_s: float, t0: float) -> list[float]:
    """SIGSTOP the server's process at `at_s` after t0 for `for_s` seconds (a wedged host), then SIGCONT. Returns
    the list the wall times of both signals are appended to."""
    import threading

    sent: list[float] = []

    def run() -> None:
        time.sleep(max(0.0, t0 + at_s - time.monotonic()))
        sim.proc.send_signal(signal.SIGSTOP)
        sent.append(time.time())
        time.sleep(for_s)
        sim.proc.send_signal(signal.SIGCONT)
        sent.append(time.time())

    threading.Thread(target=run, daemon=True).start()
    return sent


def bench_soak(work: Path, minutes: float, time_factor: float) -> dict[str, Any]:
    """Four 64-slot servers at real request durations compressed `time_factor` times, two workers with automatic
    concurrency sharing them for `minutes`; one server restarts, one is frozen, one returns bursts of 503."""
    plan = SoakPlan(minutes, time_factor)
    sims = [Sim(*plan.sim_args(i)) for i in range(4)]
    opened = time.monotonic()  # the bursting server's clock starts when its port opens (its URL line)
    prompts = work / "soak.jsonl"
    write_prompts(prompts, plan.prompts)
    cfg = work / "soak.toml"
    run_dir = work / "run-soak"
    eps = "".join(f'[[endpoints]]\nurl = "{s.url}"\nconcurrency = 0\n' for s in sims)
    cfg.write_text(
        f'[input]\npath = "{prompts}"\n[output]\ndir = "{run_dir}"\nprogress_interval_s = {plan.real(60):g}\n'
        f'[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 32768\n' + plan.client_toml() + eps
    )
    ports = [_free_port() for _ in range(2)]
    logs = [work / f"soak-worker-{i}.log" for i in range(2)]
    t0 = time.monotonic()
    workers = []
    for i, log in enumerate(logs):
        argv = [sys.executable, "-m", "pipeline", "run", str(cfg), "--num-workers", "2", "--worker-index", str(i)]
        with log.open("wb") as err:
            workers.append(subprocess.Popen([*argv, "--metrics-port", str(ports[i])], cwd=ROOT, stderr=err))
    watch = _SoakWatch(sims, workers, [f"http://127.0.0.1:{p}/metrics" for p in ports])
    t0_wall = time.time() - (time.monotonic() - t0)
    frozen = _freeze(sims[2], plan.freeze_at, plan.real(120), t0)
    try:
        codes, exits = [], []
        for w in workers:
            codes.append(w.wait())
            exits.append(time.monotonic())
        watch.stop()
        stats = [s.stats(log=True) for s in sims]
    finally:
        for s in sims:
            s.proc.send_signal(signal.SIGCONT)
            s.stop()
    out = _soak_figures(plan, watch, stats, run_dir, logs, t0, opened, codes, max(exits))
    out["frozen_s"] = [round(t - t0_wall, 2) for t in frozen]
    out["worker_exit_s"] = [round(t - t0, 1) for t in exits]
    out["last_dispatch_s"] = round(watch.last_dispatch - t0, 1)
    out["duplicate_detail"] = _duplicates(stats, t0_wall)
    return out


def _duplicates(stats: list[dict[str, Any]], t0_wall: float) -> list[list[tuple[int, str | None, float]]]:
    """Each prompt generated more than once: (server, rid, seconds after start) of every generation of it."""
    seen: dict[str, list[tuple[int, str | None, float]]] = {}
    for i, st in enumerate(stats):
        for key, log in st.pop("generation_log", {}).items():
            seen.setdefault(key, []).extend((i, rid, round(at - t0_wall, 2)) for rid, at in log)
    return [sorted(gens, key=lambda g: g[2]) for gens in seen.values() if len(gens) > 1]


def _soak_occupancy(plan: SoakPlan, watch: _SoakWatch, t0: float, opened: float) -> dict[str, Any]:
    """Running / max_running over each server's healthy samples between the first full batch (one request's
    duration after start) and the last dispatch; the bursting server's bursts are not healthy time."""
    from pipeline.sim.faults import in_burst

    lo, hi = t0 + 2 * plan.request_s, watch.last_dispatch
    every, length = plan.real(300), plan.real(30)
    per: dict[int, list[float]] = {i: [] for i in range(4)}
    minutes: dict[int, list[float]] = {}  # the same samples minute by minute (where it dips)
    for t, i, healthy, running, cap in watch.loads:
        bursting = i == 3 and (in_burst(t - opened, every, length) or in_burst(t - opened - 0.1, every, length))
        if lo <= t <= hi and healthy and not bursting:
            per[i].append(running / cap)
            minutes.setdefault(int((t - t0) // 60), []).append(running / cap)
    all_samples = [x for xs in per.values() for x in xs]
    return {
        "occupancy_by_minute": [round(sum(xs) / len(xs), 3) for _, xs in sorted(minutes.items())],
        "occupancy": round(sum(all_samples) / max(1, len(all_samples)), 4),
        "occupancy_by_server": {i: round(sum(xs) / max(1, len(xs)), 4) for i, xs in per.items()},
        "healthy_samples_by_server": {i: len(xs) for i, xs in per.items()},
    }


def _soak_rss(watch: _SoakWatch, t0: float, minutes: float) -> dict[str, Any]:
    """Each worker's RSS at minute 5 (a quarter of the run when shorter than 20 minutes) vs its last sample
    before the last dispatch."""
    mark = t0 + min(300.0, minutes * 15)
    out: dict[str, Any] = {}
    for w in (0, 1):
        mine = [(t, mb) for t, ww, mb in watch.rss if ww == w and mb > 0 and t <= watch.last_dispatch]
        early = next((mb for t, mb in mine if t >= mark), None)
        if early is None or not mine:
            continue
        out[f"worker_{w}"] = {"early_mb": round(early, 1), "end_mb": round(mine[-1][1], 1)}
        out[f"worker_{w}"]["drift"] = round(mine[-1][1] / early - 1, 3)
        out[f"worker_{w}"]["by_minute_mb"] = [round(mb) for t, mb in mine if int((t - t0) / 2) % 30 == 0]
    return out


def _soak_tail(run_dir: Path, last_dispatch_wall: float, exit_wall: float) -> dict[str, Any]:
    """What the tail is made of: the longest request still running at the last dispatch, and the exit lag after
    the last completion was stored."""
    t = pds.dataset(str(run_dir / "shards"), format="parquet").to_table(columns=["created_at", "latency_s"])
    done = pc.cast(t.column("created_at"), "int64").to_numpy() / 1e6
    latency = t.column("latency_s").to_numpy(zero_copy_only=False)
    in_tail = done >= last_dispatch_wall
    return {
        "tail_longest_request_s": round(float(latency[in_tail].max()), 2) if in_tail.any() else 0.0,
        "exit_after_last_completion_s": round(exit_wall - float(done.max()), 2),
        "request_s_p50_p99": [round(float(x), 2) for x in np.percentile(latency, [50, 99])],
    }


def _soak_events(logs: list[Path], urls: list[str]) -> dict[int, dict[str, int]]:
    """Endpoint events in the workers' logs, by server: a bursting server should push back, never go down."""
    kinds = {
        "down": ": down (",
        "up": ": up again",
        "pushback": ": pushing back (",
        "pushback_over": ": taking requests",
    }
    lines = [line for p in logs for line in p.read_text(errors="replace").splitlines()]
    return {i: {k: sum(f"{url}{m}" in line for line in lines) for k, m in kinds.items()} for i, url in enumerate(urls)}


def _soak_figures(
    plan: SoakPlan, watch: _SoakWatch, stats: list[dict[str, Any]], run_dir: Path, logs: list[Path],
    t0: float, opened: float, codes: list[int], exit_t: float,
) -> dict[str, Any]:  # fmt: skip
    per_prompt: dict[str, int] = {}
    for st in stats:  # a prompt generated on two servers is a duplicate too
        for key, n in st["generations"].items():
            per_prompt[key] = per_prompt.get(key, 0) + n
    snaps = [
        orjson.loads(p.read_bytes().splitlines()[-1]) for p in sorted((run_dir / "metrics").glob("worker-*.jsonl"))
    ]
    counts, _ = ids_and_shard_sizes(run_dir)
    wall_h = (exit_t - t0) / 3600
    log_bytes = [p.stat().st_size for p in logs]
    rss = _soak_rss(watch, t0, plan.minutes)
    occ = _soak_occupancy(plan, watch, t0, opened)
    out = {
        "prompts": plan.prompts, "time_factor": plan.factor, "mean_request_s": round(plan.request_s, 2),
        "wall_s": round(exit_t - t0, 1), "exit_codes": codes, "rows": len(counts),
        **occ,
        "exhausted_retries": sum(s.get("rejected_by_reason", {}).get("exhausted_retries", 0) for s in snaps),
        "rejected_by_reason": [s.get("rejected_by_reason", {}) for s in snaps],
        "duplicate_generations": sum(n - 1 for n in per_prompt.values() if n > 1),
        "duplicate_rows": sum(v - 1 for v in counts.values()),
        "missing_rows": plan.prompts - len(counts),
        "faults": [st["faults"] for st in stats],
        "cancelled": [st["cancelled"] for st in stats],
        "rss": rss,
        "log_bytes": log_bytes,
        "log_bytes_per_worker_hour": round(max(log_bytes) / wall_h),
        "log_bytes_per_worker_simulated_hour": round(max(log_bytes) / (wall_h * plan.factor)),
        "tail_s": round(exit_t - watch.last_dispatch, 2),
        **_soak_tail(run_dir, watch.last_dispatch_wall, time.time() - (time.monotonic() - exit_t)),
        "endpoint_events_by_server": _soak_events(logs, [s.url for s in watch.sims]),
    }  # fmt: skip
    drift = max((v["drift"] for v in rss.values()), default=float("nan"))
    out["targets"] = {
        "occupancy>=0.98": occ["occupancy"] >= 0.98,
        "exhausted_retries==0": out["exhausted_retries"] == 0,
        "duplicates==0": out["duplicate_generations"] == 0 and out["duplicate_rows"] == 0,
        "rss_drift<=0.10": drift <= 0.10,
        "tail<=mean_request": out["tail_s"] <= plan.request_s,
        "tail<=longest_request_in_flight": out["tail_s"] <= out["tail_longest_request_s"],
    }
    return out
