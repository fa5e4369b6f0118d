#!/usr/bin/env python3
"""regen benchmarks, each reported as a ratio against a baseline measured in the same run.

    python scripts/bench.py                       # overhead, scale, saturation, startup (a few minutes)
    python scripts/bench.py --only overhead --requests 20000
    python scripts/bench.py --rehearsal           # + the 902,000-prompt dress rehearsal (long)
    python scripts/bench.py --only prefix         # conversation-sticky routing vs placement by load (issue 14)
    python scripts/bench.py --only soak --minutes 20   # four 64-slot servers at real durations, compressed (issue 17)
    python scripts/bench.py --json out.json

Scenarios (issue 8): 1 client overhead vs a minimal aiohttp loop; 2 peak RSS at 1M vs 10K prompts; 3 saturation of
4 simulators with a capacity model, one dying mid-run, and the exit lag after the last completion; 4 launch to
first request; 5 the dress rehearsal. The simulator runs pinned to its own core where `taskset` exists.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pyarrow.compute as pc
import pyarrow.dataset as pds

ROOT = Path(__file__).resolve().parent.parent
SIM_CORE, CLIENT_CORE = "1", "0"


def pinned(core: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", core, *argv] if shutil.which("taskset") and os.cpu_count() and os.cpu_count() > 1 else argv


class Sim:
    def __init__(self, *args: str, core: str = SIM_CORE):
        argv = pinned(core, [sys.executable, "-m", "pipeline.sim", "--port", "0", *args])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/_sim/stats", timeout=10).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _hwm_mb(pid: int) -> float:
    """The process's own peak RSS (VmHWM). Not ru_maxrss: on Linux exec carries the forking parent's peak over."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def timed(argv: list[str], **kw: Any) -> dict[str, Any]:
    """Wall time, CPU time and peak RSS of one child process."""
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, _hwm_mb(proc.pid))
        time.sleep(0.05)
    wall = time.monotonic() - t0
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:6]} failed: {err[-2000:]}")
    return {"wall_s": wall, "cpu_s": children_cpu() - cpu0, "rss_mb": peak, "stdout": out, "end": time.time()}


def write_prompts(path: Path, n: int, chars: int = 200) -> None:
    filler = ("Explain the reasoning step by step and give a final answer. " * 8)[:chars]
    with open(path, "wb") as fh:
        for i in range(n):
            fh.write(orjson.dumps({"id": f"b{i:07d}", "prompt": f"#{i} {filler}"}) + b"\n")


def write_config(work: Path, urls: list[str], concurrency: int, prompts: Path, **extra: Any) -> Path:
    cfg = work / f"bench-{len(list(work.glob('bench-*.toml')))}.toml"
    eps = "".join(f'[[endpoints]]\nurl = "{u}"\nconcurrency = {concurrency}\n' for u in urls)
    shard_rows = extra.get("shard_rows", 10000)
    cfg.write_text(
        f'[input]\npath = "{prompts}"\n[output]\ndir = "{work / ("run-" + cfg.stem)}"\nshard_rows = {shard_rows}\n'
        f'[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 32768\n'
        "[client]\nbackoff_base_s = 0.05\nbackoff_max_s = 1\n" + extra.get("client", "") + eps
    )
    return cfg


def steady_rate(run_dir: Path) -> tuple[float, float, int, float]:
    """(completions/s, output tok/s, rows, last created_at) between the first and last stored completion."""
    ds = pds.dataset(str(run_dir / "shards"), format="parquet")
    t = ds.to_table(columns=["created_at", "completion_tokens"])
    ts = pc.cast(t.column("created_at"), "int64")
    lo, hi = pc.min(ts).as_py() / 1e6, pc.max(ts).as_py() / 1e6
    span = max(1e-6, hi - lo)
    tokens = pc.sum(t.column("completion_tokens")).as_py() or 0
    return t.num_rows / span, tokens / span, t.num_rows, hi


# ------------------------------------------------------------------ 1. client overhead


MINIMAL_LOOP = r"""
import asyncio, sys, time, aiohttp, orjson
url, n, conc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def main():
    q = asyncio.Queue()
    for i in range(n): q.put_nowait(i)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:
        async def worker():
            while not q.empty():
                i = q.get_nowait()
                body = {"model": "Qwen3.6-27B", "messages": [{"role": "user", "content": f"#{i} minimal"}],
                        "max_tokens": 32768, "chat_template_kwargs": {"enable_thinking": True}}
                async with s.post(url + "/v1/chat/completions", data=orjson.dumps(body),
                                  headers={"Content-Type": "application/json"}) as r:
                    orjson.loads(await r.read())
        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(conc)))
        print(time.monotonic() - t0)
asyncio.run(main())
"""


def bench_overhead(work: Path, requests: int, concurrency: int, tokens: int) -> dict[str, Any]:
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", str(tokens))
    try:
        base = timed(
            pinned(CLIENT_CORE, [sys.executable, "-c", MINIMAL_LOOP, sim.url, str(requests), str(concurrency)])
        )
        base_rate = requests / float(base["stdout"].strip())
        prompts = work / "overhead.jsonl"
        write_prompts(prompts, requests)
        cfg = write_config(work, [sim.url], concurrency, prompts)
        run = timed(pinned(CLIENT_CORE, [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]))
        steady, _, rows, _ = steady_rate(work / f"run-{cfg.stem}")
        # the same with SSE streaming (client.stream = true), to choose the default by measurement
        cfg_s = write_config(work, [sim.url], concurrency, prompts, client="stream = true\n")
        run_s = timed(pinned(CLIENT_CORE, [sys.executable, "-m", "pipeline", "run", str(cfg_s), "--no-progress"]))
        stream_steady, _, stream_rows, _ = steady_rate(work / f"run-{cfg_s.stem}")
    finally:
        sim.stop()
    e2e = rows / run["wall_s"]
    cpu_per_1k = run["cpu_s"] / rows * 1000
    base_cpu_per_1k = base["cpu_s"] / requests * 1000
    return {
        "requests": requests,
        "concurrency": concurrency,
        "baseline_completions_per_s": round(base_rate, 1),
        "baseline_cpu_s_per_1k": round(base_cpu_per_1k, 3),
        "baseline_rss_mb": round(base["rss_mb"], 1),
        "regen_steady_completions_per_s": round(steady, 1),
        "regen_end_to_end_completions_per_s": round(e2e, 1),
        "regen_cpu_s_per_1k": round(cpu_per_1k, 3),
        "regen_rss_mb": round(run["rss_mb"], 1),
        "regen_stream_cpu_s_per_1k": round(run_s["cpu_s"] / stream_rows * 1000, 3),
        "regen_stream_steady_completions_per_s": round(stream_steady, 1),
        "cpu_ratio": round(cpu_per_1k / base_cpu_per_1k, 2),
        "throughput_ratio_steady": round(steady / base_rate, 2),
        "throughput_ratio_end_to_end": round(e2e / base_rate, 2),
        "targets": {"cpu_ratio<=2": cpu_per_1k / base_cpu_per_1k <= 2, "steady_ratio>=0.5": steady / base_rate >= 0.5},
    }


# ------------------------------------------------------------------ 2. scale


def bench_scale(work: Path, big: int, small: int, limit: int) -> dict[str, Any]:
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "200")
    try:
        out: dict[str, Any] = {}
        for label, n in (("small", small), ("big", big)):
            prompts = work / f"scale-{n}.jsonl"
            write_prompts(prompts, n, chars=100)
            cfg = write_config(work, [sim.url], 64, prompts, shard_rows=2000)
            run = timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress", "--limit", str(limit)])
            out[f"{label}_prompts"] = n
            out[f"{label}_rss_mb"] = round(run["rss_mb"], 1)
            out[f"{label}_wall_s"] = round(run["wall_s"], 1)
    finally:
        sim.stop()
    out["limit_per_run"] = limit
    out["rss_ratio"] = round(out["big_rss_mb"] / out["small_rss_mb"], 2)
    out["targets"] = {"rss_ratio<=1.3": out["rss_ratio"] <= 1.3, "big_rss<200MB": out["big_rss_mb"] < 200}
    return out


# ------------------------------------------------------------------ 3. saturation


def bench_saturation(work: Path, requests: int) -> dict[str, Any]:
    """Four servers with a capacity model (16 running requests each, decode rates that differ), one of which
    dies early. Steady state = the middle 80% of completions, so ramp-up and the last wave do not count."""
    rates = [20000, 20000, 14000, 10000]
    sims = []
    for i, rate in enumerate(rates):
        args = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300"]
        args += ["--max-running-requests", "16", "--decode-rate", str(rate), "--seed", str(i)]
        if i == 3:
            args += ["--die-after", str(requests // 8)]
        sims.append(Sim(*args))
    try:
        prompts = work / "saturation.jsonl"
        write_prompts(prompts, requests)
        cfg = write_config(work, [s.url for s in sims], 20, prompts)
        run = timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"])
        run_dir = work / f"run-{cfg.stem}"
        t = pds.dataset(str(run_dir / "shards"), format="parquet").to_table(
            columns=["created_at", "completion_tokens", "endpoint"]
        )
    finally:
        for s in sims:
            s.stop()
    ts = pc.cast(t.column("created_at"), "int64").to_numpy() / 1e6
    order = ts.argsort()
    ts, tokens = ts[order], t.column("completion_tokens").to_numpy()[order]
    endpoints = t.column("endpoint").to_numpy(zero_copy_only=False)[order]
    lo, hi = ts[int(len(ts) * 0.1)], ts[int(len(ts) * 0.9)]
    inside = (ts >= lo) & (ts <= hi)
    achieved = tokens[inside].sum() / (hi - lo)
    died_at = ts[endpoints == sims[3].url].max() if (endpoints == sims[3].url).any() else lo
    alive = min(1.0, max(0.0, (died_at - lo) / (hi - lo)))
    capacity = sum(rates[:3]) + rates[3] * alive
    return {
        "requests": requests,
        "rows": len(ts),
        "window_s": round(hi - lo, 2),
        "dying_server_alive_share_of_window": round(alive, 2),
        "capacity_tokens_per_s": round(capacity),
        "achieved_tokens_per_s": round(achieved),
        "saturation": round(achieved / capacity, 3),
        "exit_lag_s": round(run["end"] - ts[-1], 2),
        "targets": {
            "saturation>=0.97": bool(achieved / capacity >= 0.97),
            "exit_lag<2s": bool(run["end"] - ts[-1] < 2),
        },
    }


# ------------------------------------------------------------------ 4. startup


def bench_startup(work: Path) -> dict[str, Any]:
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3")
    try:
        prompts = work / "startup.jsonl"
        write_prompts(prompts, 100)
        cfg = write_config(work, [sim.url], 8, prompts)
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"], cwd=ROOT)
        first = None
        with httpx.Client(timeout=5) as client:
            while time.monotonic() - t0 < 30:
                if client.get(f"{sim.url}/_sim/stats").json()["requests"] > 0:
                    first = time.monotonic() - t0
                    break
                time.sleep(0.005)
        proc.wait()
    finally:
        sim.stop()
    return {"launch_to_first_request_s": round(first or -1, 3), "targets": {"<1.5s": first is not None and first < 1.5}}


# ------------------------------------------------------------------ endpoints that fail (issue 5)


class _StatsWatcher:
    """Keeps each simulator's latest per-prompt generation counts, also of one that dies mid-run."""

    def __init__(self, sims: list[Sim]):
        import threading

        self.sims, self.last = sims, {s.url: {} for s in sims}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        for s in self.sims:
            try:
                self.last[s.url] = s.stats()["generations"]
            except (httpx.HTTPError, OSError):
                pass

    def _loop(self) -> None:
        while not self._stop.wait(0.3):
            self._poll()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()


def bench_endpoints(work: Path, requests: int) -> dict[str, Any]:
    """Three servers with a capacity model: throughput with all alive vs one dead from the start, and the wasted
    generations (the simulators' duplicate counts) when one is killed, frozen, or flaky."""
    base = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300"]
    base += ["--max-running-requests", "16", "--decode-rate", "15000"]
    scenarios = {
        "all_alive": [[], [], []],
        "one_dead": [[], [], None],
        "one_killed_mid_run": [[], [], ["--die-after", str(requests // 6)]],
        "flaky_500_503": [[], [], ["--fail-500", "0.05", "--fail-503", "0.05"]],
        "resets_invalid_json": [[], [], ["--fail-reset", "0.05", "--fail-invalid-json", "0.05"]],
    }
    out: dict[str, Any] = {}
    prompts = work / "endpoints.jsonl"
    write_prompts(prompts, requests)
    for name, extras in scenarios.items():
        sims = [Sim(*base, "--seed", str(i), *extra) for i, extra in enumerate(extras) if extra is not None]
        urls = [s.url for s in sims] + (["http://127.0.0.1:9"] if None in extras else [])  # a port nobody serves
        watcher = _StatsWatcher(sims)
        try:
            cfg = write_config(work, urls, 20, prompts, client="health_interval_s = 1\nhealth_timeout_s = 2\n")
            run = timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress", "--skip-preflight"])
            _, tok_rate, rows, _ = steady_rate(work / f"run-{cfg.stem}")
        finally:
            watcher.stop()
            for s in sims:
                s.stop()
        per_prompt: dict[str, int] = {}
        for gens in watcher.last.values():  # a prompt generated on two servers is waste too
            for key, n in gens.items():
                per_prompt[key] = per_prompt.get(key, 0) + n
        out[name] = {
            "rows": rows,
            "tokens_per_s": round(tok_rate),
            "wall_s": round(run["wall_s"], 1),
            "wasted_generations": sum(n - 1 for n in per_prompt.values() if n > 1),
        }
    out["one_dead_vs_all_alive"] = round(out["one_dead"]["tokens_per_s"] / out["all_alive"]["tokens_per_s"], 2)
    return out


# ------------------------------------------------------------------ prefix reuse on conversations (issue 14)


def write_conversations(path: Path, n: int, seed: int = 14) -> int:
    """ShareGPT rows of 2-6 user turns whose old answers are empty, a third with one of three long system prompts;
    returns the number of assistant turns to generate."""
    import random

    rng = random.Random(seed)
    systems = [f"You are assistant {k}. Answer carefully and check every step. " * 12 for k in range(3)]
    turns = 0
    with open(path, "wb") as fh:
        for i in range(n):
            conv = [{"from": "system", "value": systems[i % 3]}] if i % 3 == 0 else []
            for k in range(rng.randint(2, 6)):
                ask = f"Conversation {i}, question {k}: " + "explain why the sum is even. " * rng.randint(6, 30)
                conv += [{"from": "human", "value": ask}, {"from": "gpt", "value": ""}]
                turns += 1
            fh.write(orjson.dumps({"id": f"c{i:06d}", "conversations": conv}) + b"\n")
    return turns


def _prefix_placement(work: Path, prompts: Path, sims: list[Sim], sticky: bool) -> dict[str, Any]:
    for s in sims:  # every placement starts from cold caches and zeroed counters
        httpx.post(f"{s.url}/flush_cache", timeout=10)
        httpx.post(f"{s.url}/_sim/reset", timeout=10)
    client = "" if sticky else "sticky_conversations = false\n"
    cfg = write_config(work, [s.url for s in sims], 20, prompts, client=client)
    run = timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"])
    run_dir = work / f"run-{cfg.stem}"
    snap = orjson.loads((run_dir / "metrics" / "worker-0.jsonl").read_bytes().splitlines()[-1])
    caches = [s.stats()["prefix_cache"] for s in sims]
    _, tok_rate, rows, _ = steady_rate(run_dir)
    cached, prompt = sum(c["cached_tokens"] for c in caches), sum(c["prompt_tokens"] for c in caches)
    return {
        "rows": rows,
        "later_turns": snap["later_turns"],
        "later_turns_same_endpoint": snap["later_turns_same_endpoint"],
        "reuse": round(snap["later_turns_same_endpoint"] / max(1, snap["later_turns"]), 4),
        "cached_token_share": round(cached / max(1, prompt), 4),
        "prompt_tokens": prompt,
        "output_tokens_per_s": round(tok_rate),
        "wall_s": round(run["wall_s"], 1),
    }


def bench_prefix(work: Path, conversations: int) -> dict[str, Any]:
    """Three healthy servers with a capacity model and a prefix cache: the share of later turns that reach their
    conversation's endpoint and the servers' cached-token share, sticky vs placement by load alone; then the client's
    CPU per completion on multi-turn input vs single-turn prompts, both against one instant simulator."""
    prompts = work / "conversations.jsonl"
    turns = write_conversations(prompts, conversations)
    args = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300"]
    args += ["--max-running-requests", "16", "--decode-rate", "20000", "--prefill-rate", "100000"]
    sims = [Sim(*args, "--enable-cache-report", "--seed", str(i)) for i in range(3)]
    try:
        sticky = _prefix_placement(work, prompts, sims, sticky=True)
        by_load = _prefix_placement(work, prompts, sims, sticky=False)
    finally:
        for s in sims:
            s.stop()
    out: dict[str, Any] = {"conversations": conversations, "turns": turns, "sticky": sticky, "by_load": by_load}
    out["client"] = _multi_turn_cpu(work, prompts, turns)
    out["targets"] = {"sticky_reuse>=0.95": sticky["reuse"] >= 0.95}
    return out


def _multi_turn_cpu(work: Path, conversations: Path, turns: int) -> dict[str, Any]:
    """Client CPU per completion: the conversations (each turn a completion) vs as many single-turn prompts."""
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "1800")
    try:
        single = work / "single-turn.jsonl"
        write_prompts(single, turns)
        out: dict[str, Any] = {"completions": turns}
        for label, path in (("multi_turn", conversations), ("single_turn", single)):
            cfg = write_config(work, [sim.url], 128, path)
            run = timed(pinned(CLIENT_CORE, [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]))
            out[f"{label}_cpu_s_per_1k"] = round(run["cpu_s"] / turns * 1000, 3)
            out[f"{label}_completions_per_core_s"] = round(turns / run["cpu_s"])
            out[f"{label}_wall_s"] = round(run["wall_s"], 1)
    finally:
        sim.stop()
    out["cpu_ratio_multi_vs_single"] = round(out["multi_turn_cpu_s_per_1k"] / out["single_turn_cpu_s_per_1k"], 2)
    return out


# ------------------------------------------------------------------ soak at real durations, compressed (issue 17)


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


def _freeze(sim: Sim, at_s: float, for_s: float, t0: float) -> None:
    """SIGSTOP the server's process at `at_s` after t0 for `for_s` seconds (a wedged host), then SIGCONT."""
    import threading

    def run() -> None:
        time.sleep(max(0.0, t0 + at_s - time.monotonic()))
        sim.proc.send_signal(signal.SIGSTOP)
        time.sleep(for_s)
        sim.proc.send_signal(signal.SIGCONT)

    threading.Thread(target=run, daemon=True).start()


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
    _freeze(sims[2], plan.freeze_at, plan.real(120), t0)
    try:
        codes, exits = [], []
        for w in workers:
            codes.append(w.wait())
            exits.append(time.monotonic())
        watch.stop()
        stats = [s.stats() for s in sims]
    finally:
        for s in sims:
            s.proc.send_signal(signal.SIGCONT)
            s.stop()
    return _soak_figures(plan, watch, stats, run_dir, logs, t0, opened, codes, max(exits))


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
    counts, _ = _ids_and_shard_sizes(run_dir)
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


# ------------------------------------------------------------------ 5. dress rehearsal


def _ids_and_shard_sizes(run_dir: Path) -> tuple[dict[str, int], list[int]]:
    """How often each id is committed (shards and rejects), and the byte size of every shard."""
    counts: dict[str, int] = {}
    sizes = [f.stat().st_size for f in sorted((run_dir / "shards").glob("*.parquet"))]
    for sub in ("shards", "rejects"):
        for f in sorted((run_dir / sub).glob("*.parquet")):
            for i in pds.dataset(str(f)).to_table(columns=["id"]).column("id").to_pylist():
                counts[i] = counts.get(i, 0) + 1
    return counts, sizes


def bench_rehearsal(work: Path, prompts: int, kills: int) -> dict[str, Any]:
    """The real job at full size: `prompts` synthetic prompts, four instant simulators with light faults, SIGKILLed
    `kills` times at random moments and resumed, then the exactly-once check over every id."""
    import random

    rng = random.Random(7)
    sims = [
        Sim(*["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300"],
            *["--seed", str(i), "--fail-503", "0.002", "--fail-empty", "0.002", "--fail-reset", "0.001"])
        for i in range(4)
    ]  # fmt: skip
    try:
        path = work / "rehearsal.jsonl"
        write_prompts(path, prompts, chars=100)
        cfg = write_config(work, [s.url for s in sims], 64, path)
        argv = [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]
        peak, t0, rounds = 0.0, time.monotonic(), 0
        while True:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            span = max(4.0, prompts / 1000)  # about the run's length at ~1,000 completions/s
            deadline = time.monotonic() + (rng.uniform(0.1, 0.25) * span if rounds < kills else 1e9)
            while proc.poll() is None and time.monotonic() < deadline:
                peak = max(peak, _hwm_mb(proc.pid))
                time.sleep(0.1)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            err = proc.stderr.read() if proc.stderr else ""
            if proc.stderr:
                proc.stderr.close()
            rounds += 1
            if proc.returncode == 0:
                break
            if rounds > kills + 1:
                raise RuntimeError(f"rehearsal run failed: {err[-2000:]}")
        wall = time.monotonic() - t0
        stats = [s.stats() for s in sims]
    finally:
        for s in sims:
            s.stop()
    counts, sizes = _ids_and_shard_sizes(work / f"run-{cfg.stem}")
    generations = sum(st["generations_total"] for st in stats)
    return {
        "prompts": prompts,
        "kills": min(kills, rounds - 1),
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(peak, 1),
        "ids_exactly_once": len(counts) == prompts and max(counts.values()) == 1,
        "duplicates": sum(v - 1 for v in counts.values()),
        "missing": prompts - len(counts),
        "generations": generations,
        "wasted_generations": sum(st["duplicate_generations"] for st in stats),
        "shards": len(sizes),
        "shard_mb_median": round(sorted(sizes)[len(sizes) // 2] / 2**20, 1) if sizes else 0,
        "targets": {"exactly_once": len(counts) == prompts and max(counts.values()) == 1, "peak_rss<200MB": peak < 200},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--only",
        action="append",
        choices=["overhead", "scale", "saturation", "startup", "endpoints", "prefix", "soak"],
    )
    ap.add_argument("--minutes", type=float, default=20, help="wall time of the soak scenario (real figures: >= 20)")
    ap.add_argument("--time-factor", type=float, default=10, help="soak: real durations and timeouts / this")
    ap.add_argument("--conversations", type=int, default=1000, help="multi-turn rows in the prefix scenario")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=1800, help="mean completion tokens in the overhead scenario")
    ap.add_argument("--scale-big", type=int, default=1_000_000)
    ap.add_argument("--rehearsal", type=int, nargs="?", const=902_000, metavar="N", help="dress rehearsal, N prompts")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="regen-bench-"))
    wanted = args.only or ["overhead", "scale", "saturation", "startup"]
    if args.rehearsal:
        wanted = [*(args.only or []), "rehearsal"]
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    for name in wanted:
        if name == "overhead":
            results[name] = bench_overhead(work, args.requests, args.concurrency, args.tokens)
        elif name == "scale":
            results[name] = bench_scale(work, args.scale_big, 10_000, limit=5000)
        elif name == "saturation":
            results[name] = bench_saturation(work, max(4000, args.requests // 3))
        elif name == "startup":
            results[name] = bench_startup(work)
        elif name == "endpoints":
            results[name] = bench_endpoints(work, 3000)
        elif name == "prefix":
            results[name] = bench_prefix(work, args.conversations)
        elif name == "soak":
            results[name] = bench_soak(work, args.minutes, args.time_factor)
        elif name == "rehearsal":
            results[name] = bench_rehearsal(work, args.rehearsal, kills=3)
        print(f"## {name}\n" + "\n".join(f"  {k}: {v}" for k, v in results[name].items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    asyncio.run(asyncio.sleep(0))
    raise SystemExit(main())
