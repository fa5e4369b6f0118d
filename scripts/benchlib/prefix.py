"""Prefix reuse on conversations (issue 14): conversation-sticky routing vs placement by load alone, and the
client's CPU on multi-turn input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import orjson

from benchlib import CLIENT_CORE, Sim, pinned, steady_rate, timed, write_config, write_prompts


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
