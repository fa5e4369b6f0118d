"""Scenario 2, scale: peak RSS of a run over 1M prompts against one over 10K (both stopped at the same --limit)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchlib import Sim, timed, write_config, write_prompts


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
