"""Scenario 3, saturation: four simulators with a capacity model, one dying mid-run; the share of their capacity
a run achieves, and the exit lag after the last completion."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as pds

from benchlib import Sim, timed, write_config, write_prompts


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
