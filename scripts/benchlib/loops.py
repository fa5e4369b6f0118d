"""Loops (issues 25, 36): a simulator where 3% of generations fall into a verbatim loop and run to max_tokens
32,768, requests at the seed's mean length (1,800 tokens); the same prompts with the loop guard on (the default)
and off, in the same run. Reported: the tokens the looping generations cost, the tokens spent per accepted
completion, the accepted share and the looping rows stored.

Then the other class (issue 36): answers whose correct content is repetition, each ended by the model
(tests/helpers/repetitive.py: 24 shapes and the escaped 650-character table row), beside runaway loops that never
end, answered by a simulator with scripted replies streamed in 7-character deltas at a real decode rate. Reported:
the legitimate share stored whole on its first request, and the runaway loops rejected `looping` with the tokens
they cost against running them to the limit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.parquet as pq

from benchlib import Sim, timed, write_config, write_prompts
from pipeline.loops import find_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.helpers.repetitive import LEGIT, escaped_table_row, runaway


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
    legit = bench_legit(work)
    cpu = _guard_cpu(work, 2000)
    return {
        "prompts": n,
        "guard_on": on,
        "guard_off": off,
        "looping_tokens_cut": round(cut, 4),
        "tokens_per_accepted_on_vs_off": round(on["tokens_per_accepted"] / max(1, off["tokens_per_accepted"]), 4),
        "client_cpu_s_per_1k_completions": cpu,
        "legitimate_repetition": legit,
        "targets": {
            "looping_tokens_cut>=0.8": cut >= 0.8,
            "legitimate_repetition_kept_whole": legit["kept_whole_share"] == 1.0,
            "runaway_loops_rejected_looping": legit["runaway_rejected_looping"] == legit["runaway"],
            "runaway_tokens_cut>=0.8": legit["runaway_tokens_cut"] >= 0.8,
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


def bench_legit(work: Path, copies: int = 4) -> dict[str, Any]:
    """Each legitimate shape and each runaway loop (three kinds, 120,000 characters: ~30,000 tokens, what
    max_tokens 32,768 would let run) `copies` times, through a default `regen run` against scripted replies."""
    kept = {f"{name}-{k}": text for name, text in {**LEGIT, "escaped_table_row": escaped_table_row()}.items()
            for k in range(copies)}  # fmt: skip
    loops = {f"{kind}-{k}": runaway(kind, 120_000) for kind in ("zeros_answer", "zeros_reasoning", "prose")
             for k in range(copies)}  # fmt: skip
    replies = work / "legit-replies.jsonl"
    lines = [{"prompt": f"prompt {n}", "reasoning": "I will write exactly what was asked.", "content": t}
             for n, t in kept.items()]  # fmt: skip
    lines += [{"prompt": f"prompt {n}", "reasoning": r, "content": a, "finish_reason": "length"}
              for n, (r, a) in loops.items()]  # fmt: skip
    replies.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    prompts = work / "legit-prompts.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": n, "prompt": f"prompt {n}"}) + b"\n" for n in [*kept, *loops]))
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--replies", str(replies),
              "--stream-chunk-chars", "7", "--decode-rate", "200000", "--max-running-requests", "64")  # fmt: skip
    try:
        cfg = write_config(work, [sim.url], 64, prompts)
        timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"])
        stats = sim.stats()
    finally:
        sim.stop()
    run = work / f"run-{cfg.stem}"
    rows = {r["id"]: r for f in sorted((run / "shards").glob("*.parquet")) for r in pq.read_table(f).to_pylist()}
    rejects = {r["id"]: r for f in sorted((run / "rejects").glob("*.parquet")) for r in pq.read_table(f).to_pylist()}
    whole = [n for n, t in kept.items() if n in rows and rows[n]["answer"] == t.strip() and rows[n]["attempts"] == 1]
    looping = [n for n in loops if n in rejects and rejects[n]["reason"] == "looping"]
    full = 2 * len(loops) * 120_000 / 4  # two attempts each, run to the end of their text
    return {
        "legitimate": len(kept),
        "kept_whole_first_request": len(whole),
        "kept_whole_share": round(len(whole) / len(kept), 4),
        "with_repetition_measured": sum(1 for n in whole if rows[n]["repetition_chars"]),
        "runaway": len(loops),
        "runaway_rejected_looping": len(looping),
        "runaway_tokens": stats["looping"]["tokens"],
        "runaway_tokens_cut": round(1 - stats["looping"]["tokens"] / full, 4),
    }
