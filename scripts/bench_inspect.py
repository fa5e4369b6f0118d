"""Measure `status` and `inspect` on a synthetic RUN_DIR: wall time, CPU time (user + sys of the whole process,
imports included; steadier than wall time on a shared machine) and peak RSS, each in a fresh process.

    python3 scripts/bench_inspect.py --rows 1000000 --row-bytes 7000 --dir /tmp/bench-run

The run is generated quickly with pyarrow (text drawn from a pool of random-word blocks, made unique per row by
its id, dictionary encoding off for text so sizes are realistic, zstd like the store): 100-row-group shards of
10,000 rows, 5% of rows in rejects. Generation is skipped when the directory already holds the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
from pipeline.schema import reject_schema, shard_schema

SHARD_ROWS = 10_000
GROUP_ROWS = 512
POOL = 2048
WORDS = np.array(
    "the of a to is and model token answer prime shard value proof sum graph node edge step check result so "
    "we need find let compute then therefore wait because number each case first second total".split()
)
ENDPOINTS = [f"http://10.0.0.{i}:30000" for i in range(1, 5)]
T0 = 1_780_000_000


def _pool(rng: np.random.Generator, chars: int) -> pa.Array:
    words = rng.choice(WORDS, size=(POOL, max(1, chars // 5)))
    return pa.array([" ".join(row)[:chars] for row in words], pa.string())


def _table(shard: int, rows: int, row_bytes: int, rejects: bool) -> pa.Table:
    rng = np.random.default_rng(shard)
    reasoning_pool, answer_pool = _pool(rng, int(row_bytes * 0.8)), _pool(rng, int(row_bytes * 0.15))
    start = shard * SHARD_ROWS
    ids = pa.array([f"r{start + k:08d}" for k in range(rows)], pa.string())
    pick = pa.array(rng.integers(0, POOL, rows))
    reasoning = pc.binary_join_element_wise(ids, reasoning_pool.take(pick), " ")
    answer = pc.binary_join_element_wise(ids, answer_pool.take(pa.array(rng.integers(0, POOL, rows))), " ")
    messages = pa.array(
        [[{"role": "user", "content": f"question {start + k}"}] for k in range(rows)],
        shard_schema().field("messages").type,
    )
    reasoning_tokens = rng.integers(200, 4000, rows).astype(np.int32)
    cols = {
        "id": ids,
        "messages": messages,
        "reasoning": reasoning,
        "answer": answer,
        "finish_reason": pa.array(np.where(rng.random(rows) < 0.98, "stop", "length")),
        "prompt_tokens": pa.array(rng.integers(20, 400, rows).astype(np.int32)),
        "completion_tokens": pa.array(reasoning_tokens + rng.integers(50, 800, rows).astype(np.int32)),
        "reasoning_tokens": pa.array(reasoning_tokens),
        "model": pa.array(["Qwen3.6-27B"] * rows),
        "endpoint": pa.array(np.array(ENDPOINTS)[rng.integers(0, len(ENDPOINTS), rows)]),
        "attempts": pa.array(np.ones(rows, np.int16)),
        "latency_s": pa.array(rng.gamma(4, 10, rows).astype(np.float32)),
        "seed": pa.array(np.zeros(rows, np.int64)),
        "created_at": pa.array((T0 + start + np.arange(rows)) * 1_000_000, pa.timestamp("us", tz="UTC")),
        "spec_accept_length": pa.array(rng.uniform(2, 4, rows).astype(np.float32)),
    }
    schema = reject_schema() if rejects else shard_schema()
    if rejects:
        cols["reason"] = pa.array(["truncated"] * rows)
        cols["detail"] = pa.array(["finish_reason=length"] * rows)
    # columns this generator does not fill (spec_verify_ct, repetition_chars, turns, ...) are null, as in a run's
    # rows the server reported nothing for
    return pa.Table.from_pydict(
        {f.name: cols[f.name] if f.name in cols else pa.nulls(rows, f.type) for f in schema}, schema=schema
    )


def _write(job: tuple[Path, int, int, int, bool]) -> int:
    path, shard, rows, row_bytes, rejects = job
    table = _table(shard, rows, row_bytes, rejects)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(
        table,
        tmp,
        row_group_size=GROUP_ROWS,
        compression="zstd",
        use_dictionary=["finish_reason", "model", "endpoint", "reason", "detail"],
    )
    os.replace(tmp, path)
    return path.stat().st_size


def generate(run: Path, rows: int, row_bytes: int, workers: int) -> dict[str, float]:
    (run / "shards").mkdir(parents=True, exist_ok=True)
    (run / "rejects").mkdir(exist_ok=True)
    n_shards = (rows + SHARD_ROWS - 1) // SHARD_ROWS
    n_rejects = max(1, n_shards // 20)
    jobs = []
    for s in range(n_shards):
        count = min(SHARD_ROWS, rows - s * SHARD_ROWS)
        rejects = s >= n_shards - n_rejects
        folder = "rejects" if rejects else "shards"
        jobs.append((run / folder / f"worker-0-{s:05d}.parquet", s, count, row_bytes, rejects))
    t = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        size = sum(pool.map(_write, jobs))
    manifest = {"schema_version": 1, "config": {}, "input": {"files": [], "total": rows}, "counts": {}}
    (run / "run.json").write_bytes(orjson.dumps(manifest))
    return {"generate_s": time.perf_counter() - t, "bytes_on_disk": size, "files": len(jobs)}


_CHILD = """
import json, resource, sys, time
from pathlib import Path
from pipeline.inspection import inspect_run, run_status, format_inspect, write_html
t = time.perf_counter()
what = sys.argv[1]
run = Path(sys.argv[2])
if what == "status":
    result = run_status(run)
elif what == "inspect":
    result = inspect_run(run, sample=5, seed=0)
    write_html(result, run / "report.html")
elif what == "inspect-no-reasoning":
    result = inspect_run(run, sample=5, seed=0, reasoning=False)
else:
    result = inspect_run(run, sample=5, seed=0, where=sys.argv[3])
wall = time.perf_counter() - t
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"what": what, "wall_s": round(wall, 2), "cpu_s": round(use.ru_utime + use.ru_stime, 2),
      "peak_rss_mb": round(use.ru_maxrss / 1024), "rows": result.get("rows", result.get("done"))}))
"""


def measure(run: Path, what: str, *extra: str) -> dict[str, object]:
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, "-c", _CHILD, what, str(run), *extra]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--row-bytes", type=int, default=7000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/regen-bench-run"))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if not (args.dir / "run.json").exists():
        print(json.dumps(generate(args.dir, args.rows, args.row_bytes, args.workers)), flush=True)
    jobs = [("status", ()), ("inspect", ()), ("inspect-no-reasoning", ()), ("where", ("completion_tokens > 4000",))]
    for what, extra in jobs:
        print(json.dumps(measure(args.dir, what, *extra)), flush=True)


if __name__ == "__main__":
    main()
