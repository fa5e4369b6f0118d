"""Scenario 1, client overhead: regen against a minimal aiohttp loop on the same simulator, by CPU per completion
and steady rate, with and without streaming."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchlib import CLIENT_CORE, Sim, pinned, steady_rate, timed, write_config, write_prompts

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
    """Two rounds of (minimal loop, regen) on one simulator, each figure the better of its two: noise on a shared
    machine only ever adds CPU, and one noisy baseline moved the ratio by a third (BENCHMARKS.md). Then one
    streaming run."""
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", str(tokens))
    prompts = work / "overhead.jsonl"
    bases, runs = [], []
    try:
        write_prompts(prompts, requests)
        for _ in range(2):
            argv = [sys.executable, "-c", MINIMAL_LOOP, sim.url, str(requests), str(concurrency)]
            base = timed(pinned(CLIENT_CORE, argv))
            bases.append((base["cpu_s"], requests / float(base["stdout"].strip()), base["rss_mb"]))
            cfg = write_config(work, [sim.url], concurrency, prompts)
            run = timed(pinned(CLIENT_CORE, [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]))
            steady, _, rows, _ = steady_rate(work / f"run-{cfg.stem}")
            runs.append((run["cpu_s"] / rows, steady, rows / run["wall_s"], run["rss_mb"]))
        # the same with SSE streaming (client.stream = true), to choose the default by measurement
        cfg_s = write_config(work, [sim.url], concurrency, prompts, client="stream = true\n")
        run_s = timed(pinned(CLIENT_CORE, [sys.executable, "-m", "pipeline", "run", str(cfg_s), "--no-progress"]))
        stream_steady, _, stream_rows, _ = steady_rate(work / f"run-{cfg_s.stem}")
    finally:
        sim.stop()
    base = {"cpu_s": min(b[0] for b in bases), "rss_mb": max(b[2] for b in bases)}
    base_rate = max(b[1] for b in bases)
    cpu_per_row, steady, e2e = min(r[0] for r in runs), max(r[1] for r in runs), max(r[2] for r in runs)
    run = {"rss_mb": max(r[3] for r in runs)}
    cpu_per_1k = cpu_per_row * 1000
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
        "stream_vs_plain_cpu": round(run_s["cpu_s"] / stream_rows * 1000 / cpu_per_1k, 2),
        "regen_stream_steady_completions_per_s": round(stream_steady, 1),
        "cpu_ratio": round(cpu_per_1k / base_cpu_per_1k, 2),
        "throughput_ratio_steady": round(steady / base_rate, 2),
        "throughput_ratio_end_to_end": round(e2e / base_rate, 2),
        "targets": {
            "cpu_ratio<=2": cpu_per_1k / base_cpu_per_1k <= 2,
            "steady_ratio>=0.6": steady / base_rate >= 0.6,
            "stream_vs_plain<=3": run_s["cpu_s"] / stream_rows * 1000 / cpu_per_1k <= 3,
        },
    }
