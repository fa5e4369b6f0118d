"""Scenario 5, the dress rehearsal: the real job at full size, SIGKILLed and resumed, then the exactly-once check."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import ROOT, Sim, hwm_mb, ids_and_shard_sizes, write_config, write_prompts


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
                peak = max(peak, hwm_mb(proc.pid))
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
    counts, sizes = ids_and_shard_sizes(work / f"run-{cfg.stem}")
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
