"""Loops (issue 25): a simulator where 3% of generations fall into a verbatim loop and run to max_tokens 32,768,
requests at the seed's mean length (1,800 tokens); the same prompts with the loop guard on (the default) and off,
in the same run. Reported: the tokens the looping generations cost, the tokens spent per accepted completion, the
accepted share and the looping rows stored."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from benchlib import Sim, timed, write_config, write_prompts
from pipeline.loops import find_loop


def _one(work: Path, prompts: Path, sim: Sim, n: int, guard: bool) -> dict[str, Any]:
    httpx.post(f"{sim.url}/_sim/reset", timeout=10)
    client = "" if guard else "loop_guard = false\n"
    cfg = write_config(work, [sim.url], 64, prompts, client=client)
    run = timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"])
    stats = sim.stats()
    rows = []
    for f in sorted((work / f"run-{cfg.stem}" / "shards").glob("*.parquet")):
        rows += pq.read_table(f, columns=["reasoning", "answer"]).to_pylist()
    spent = stats["generation_tokens_total"] + stats["cancelled_tokens"]
    return {
        "accepted": len(rows),
        "accepted_share": round(len(rows) / n, 4),
        "looping_generations": stats["looping"]["generations"],
        "looping_tokens": stats["looping"]["tokens"],
        "tokens_spent": spent,
        "tokens_per_accepted": round(spent / max(1, len(rows))),
        "looping_rows_stored": sum(bool(find_loop(r["reasoning"]) or find_loop(r["answer"])) for r in rows),
        "wall_s": round(run["wall_s"], 1),
        "client_cpu_s": round(run["cpu_s"], 2),
    }


def bench_loops(work: Path, n: int) -> dict[str, Any]:
    prompts = work / "loop-prompts.jsonl"
    write_prompts(prompts, n)
    args = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "1800"]
    args += ["--max-running-requests", "64", "--decode-rate", "400000", "--loop-share", "0.03", "--seed", "25"]
    sim = Sim(*args)
    try:
        on = _one(work, prompts, sim, n, guard=True)
        off = _one(work, prompts, sim, n, guard=False)
    finally:
        sim.stop()
    cut = 1 - on["looping_tokens"] / max(1, off["looping_tokens"])
    cpu = _guard_cpu(work, 2000)
    return {
        "prompts": n,
        "guard_on": on,
        "guard_off": off,
        "looping_tokens_cut": round(cut, 4),
        "tokens_per_accepted_on_vs_off": round(on["tokens_per_accepted"] / max(1, off["tokens_per_accepted"]), 4),
        "client_cpu_s_per_1k_completions": cpu,
        "targets": {
            "looping_tokens_cut>=0.8": cut >= 0.8,
            "accepted_share_not_lower": on["accepted_share"] >= off["accepted_share"],
            "no_looping_rows_stored": on["looping_rows_stored"] == 0 and off["looping_rows_stored"] == 0,
        },
    }


def _guard_cpu(work: Path, n: int) -> dict[str, float]:
    """regen's CPU per 1,000 completions of ~1,800 tokens from an instant simulator (no loops): streamed with the
    guard, streamed without it, and not streamed."""
    prompts = work / "cpu-prompts.jsonl"
    write_prompts(prompts, n)
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "1800")
    out = {}
    try:
        for name, client in (
            ("stream_guard", ""),
            ("stream_no_guard", "loop_guard = false\n"),
            ("no_stream", "stream = false\n"),
        ):
            cfg = write_config(work, [sim.url], 64, prompts, client=client)
            run = timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"])
            out[name] = round(run["cpu_s"] / n * 1000, 3)
    finally:
        sim.stop()
    return out
