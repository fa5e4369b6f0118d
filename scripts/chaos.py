#!/usr/bin/env python3
"""Chaos test: run `regen run` against a simulator, kill it at random moments, resume, check exactly-once.

    python scripts/chaos.py --prompts 2000 --kills 10            # the long version
    python scripts/chaos.py --prompts 300 --kills 3 --json       # what the test suite runs

Each round starts `regen run` as a subprocess (with 1..--max-workers workers, the count changing between rounds),
waits a random moment, then SIGKILLs it (or SIGTERM/SIGINT, some of the time). After the rounds a final run
finishes the rest. Then: every input id must be in exactly one of shards/rejects, every committed file must read,
and the simulator's per-prompt generation counts give the wasted work (a prompt generated more than once).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent


def start_sim(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.sim", "--port", "0", *args], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def write_inputs(work: Path, n: int, url: str, sync_s: float, shard_rows: int) -> Path:
    with open(work / "prompts.jsonl", "wb") as fh:
        for i in range(n):
            fh.write(orjson.dumps({"id": f"c{i:06d}", "prompt": f"Chaos prompt {i}: count to {i % 17}."}) + b"\n")
    cfg = work / "chaos.toml"
    cfg.write_text(
        f'[input]\npath = "{work / "prompts.jsonl"}"\n'
        f'[output]\ndir = "{work / "run"}"\nshard_rows = {shard_rows}\n'
        f"row_group_rows = 16\nsync_interval_s = {sync_s}\n"
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 2048\n'
        "[client]\nbackoff_base_s = 0.01\nbackoff_max_s = 0.1\ndrain_timeout_s = 5\n"
        f'[[endpoints]]\nurl = "{url}"\nconcurrency = 32\n'
    )
    return cfg


def check(run_dir: Path, n: int) -> dict[str, object]:
    counts: Counter[str] = Counter()
    files = 0
    for sub in ("shards", "rejects"):
        for path in (run_dir / sub).glob("*.parquet"):
            counts.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
            files += 1
    expected = {f"c{i:06d}" for i in range(n)}
    return {
        "files": files,
        "rows": sum(counts.values()),
        "duplicates": sum(v - 1 for v in counts.values() if v > 1),
        "missing": len(expected - set(counts)),
        "unexpected": len(set(counts) - expected),
    }


def chaos(prompts: int, kills: int, max_workers: int, seed: int, decode_rate: int, sync_s: float) -> dict[str, object]:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="regen-chaos-"))
    sim_args = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "400"]
    sim, url = start_sim([*sim_args, "--decode-rate", str(decode_rate), "--max-running-requests", "64"])
    try:
        cfg = write_inputs(work, prompts, url, sync_s, shard_rows=max(20, prompts // 12))
        signals = []
        for _ in range(kills):
            workers = rng.randint(1, max_workers)
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]
                    + ["--worker-index", str(i), "--num-workers", str(workers)],
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for i in range(workers)
            ]
            time.sleep(rng.uniform(0.8, 3.0))
            sig = rng.choices([signal.SIGKILL, signal.SIGTERM, signal.SIGINT], weights=[6, 1, 1])[0]
            signals.append(sig.name)
            for proc in procs:
                proc.send_signal(sig)
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        final = subprocess.run(
            [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        stats = httpx.get(f"{url}/_sim/stats", timeout=10).json()
        result = check(work / "run", prompts)
        result.update(
            final_exit=final.returncode,
            final_stderr=final.stderr[-2000:] if final.returncode else "",
            kills=kills,
            signals=dict(Counter(signals)),
            generations=stats["generations_total"],
            wasted_generations=stats["duplicate_generations"],
            wasted_per_kill=stats["duplicate_generations"] / max(1, kills),
            work_dir=str(work),
        )
        return result
    finally:
        sim.send_signal(signal.SIGKILL)
        sim.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--max-workers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "1")))
    ap.add_argument("--decode-rate", type=int, default=60000, help="simulator aggregate tokens/s")
    ap.add_argument("--sync-interval", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = chaos(args.prompts, args.kills, args.max_workers, args.seed, args.decode_rate, args.sync_interval)
    print(json.dumps(result, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    ok = result["duplicates"] == 0 and result["missing"] == 0 and result["final_exit"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
