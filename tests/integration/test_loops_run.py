"""Issue 25 end to end: `regen run` (a real subprocess) against a real simulator where 5% of generations fall into
a verbatim loop and run to max_tokens at the decode rate. With the guard on (the default), every id ends exactly
once, no stored row loops, the looping generations are stopped early on the server and resampled, and the summary,
`status --json` and the metrics report them and the tokens saved; with it off, each loop costs max_tokens.

Scaled time: a normal generation lasts ~0.5-1 s and a loop left alone ~6-7 s, several times the 1 s stall timeout,
the 1 s floor of the hung-request deadline and the 0.5 s health probes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import orjson

from pipeline.loops import find_loop
from tests.helpers.exactly_once import committed_ids, read_rows
from tests.helpers.processes import regen

PROMPTS = 200
MAX_TOKENS = 12288  # ~49,000 characters: the guard stops a loop past 8,000 repeated (loops.GUARD_REPEAT)
SIM = (
    "--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300",
    "--decode-rate", "20000", "--max-running-requests", "32", "--loop-share", "0.05", "--seed", "4",
)  # fmt: skip


def _setup(tmp_path: Path, url: str) -> tuple[Path, list[str]]:
    ids = [f"q{i:04d}" for i in range(PROMPTS)]
    (tmp_path / "prompts.jsonl").write_bytes(
        b"".join(orjson.dumps({"id": i, "prompt": f"Problem {i}: how many primes are below {n * 7}?"}) + b"\n"
                 for n, i in enumerate(ids))
    )  # fmt: skip
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[input]
path = "{tmp_path / "prompts.jsonl"}"
[output]
dir = "{tmp_path / "run"}"
shard_rows = 100
sync_interval_s = 0.2
[generation]
model = "Qwen3.6-27B"
max_tokens = {MAX_TOKENS}
[client]
max_attempts = 4
stall_timeout_s = 1.0
hang_floor_s = 1.0
health_interval_s = 0.5
health_timeout_s = 0.5
backoff_base_s = 0.01
backoff_max_s = 0.05
[[endpoints]]
url = "{url}"
concurrency = 32
"""
    )
    return cfg, ids


def _run(tmp_path: Path, sim, *sets: str) -> tuple[dict, dict, list[dict], str]:
    server = sim(*SIM)
    cfg, ids = _setup(tmp_path, server.url)
    args = [a for s in sets for a in ("--set", s)]
    result = regen("run", str(cfg), "--no-progress", *args, timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    placed = Counter(committed_ids(run_dir, "shards") + committed_ids(run_dir, "rejects"))
    assert set(placed) == set(ids) and max(placed.values()) == 1  # every id exactly once
    rows = read_rows(run_dir, "shards")
    assert [r["id"] for r in rows if find_loop(r["reasoning"]) or find_loop(r["answer"])] == []  # none loops
    status = regen("status", str(run_dir), "--json")
    assert status.returncode == 0, status.stderr
    return server.stats(), json.loads(status.stdout), rows, result.stderr


def test_looping_generations_are_stopped_early_and_resampled(tmp_path: Path, sim) -> None:
    stats, status, rows, stderr = _run(tmp_path, sim)
    looped = stats["looping"]
    assert looped["generations"] >= 5  # ~5% of ~200 first attempts, plus the odd resample that loops again
    assert looped["tokens"] < looped["generations"] * MAX_TOKENS / 4  # each stopped well before max_tokens
    assert len(rows) >= PROMPTS * 0.97  # resampled with a new seed: most prompts accepted
    loops = status["loops"]
    assert loops["stopped"] == loops["looping"] == looped["generations"]
    assert stats["cancelled"] >= loops["stopped"] and stats["in_flight"] == 0  # aborted there, nothing left decoding
    assert loops["tokens_saved"] > looped["generations"] * MAX_TOKENS / 2
    assert f"{loops['stopped']} stopped early" in stderr and "output tokens not generated" in stderr


def test_without_the_guard_each_loop_runs_to_max_tokens(tmp_path: Path, sim) -> None:
    stats, status, rows, _ = _run(tmp_path, sim, "client.loop_guard=false")
    looped = stats["looping"]
    assert looped["generations"] >= 5 and looped["tokens"] == looped["generations"] * MAX_TOKENS
    assert status["loops"]["stopped"] == 0 and status["loops"]["looping"] == looped["generations"]
    assert len(rows) >= PROMPTS * 0.97  # rejected as truncated (DESIGN.md 5) and resampled all the same
