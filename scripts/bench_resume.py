"""Benchmark: how long open() takes, and how much memory it needs, on a RUN_DIR of N committed rows.

    python scripts/bench_resume.py --rows 1000000 [--dir DIR] [--journal-rows 5000] [--workers 1]

Synthesises committed parts of `--part-rows` rows (small text; 5% rejects) plus one orphan journal, then measures
`RunStore.open()` in a fresh process so peak RSS belongs to the resume alone. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
from pipeline.engine.memory import tuned_for_run
from pipeline.schema import reject_schema, shard_schema, to_table
from pipeline.store import synthetic
from pipeline.store.files import REJECTS, SHARDS, parquet_options
from pipeline.store.journal import JournalWriter, encode
from pipeline.store.run_store import RunStore
from pipeline.store.shards import part_name


def synthesise(run_dir: Path, rows: int, part_rows: int, journal_rows: int) -> None:
    for sub in (SHARDS, REJECTS, "journal"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    templates = {
        SHARDS: to_table([synthetic.accepted(f"t{i}") for i in range(part_rows)], shard_schema()),
        REJECTS: to_table([synthetic.rejected(f"t{i}") for i in range(part_rows)], reject_schema()),
    }
    start = 0
    for seq, start in enumerate(range(0, rows, part_rows)):
        n = min(part_rows, rows - start)
        kind = REJECTS if seq % 20 == 19 else SHARDS
        ids = pa.array([f"prompt-{i:09d}" for i in range(start, start + n)], pa.string())
        table = templates[kind].slice(0, n).set_column(0, pa.field("id", pa.string(), nullable=False), ids)
        pq.write_table(table, run_dir / kind / part_name(0, seq), row_group_size=512, **parquet_options(table.schema))
    journal = JournalWriter(run_dir / "journal", 1, 0)
    journal.append([encode("accepted", synthetic.accepted(f"journal-{i}")) for i in range(journal_rows)])
    journal.close()


def _peak_rss_mb() -> float:
    """Peak RSS of this process. /proc's VmHWM belongs to this exec; ru_maxrss can carry over the parent's peak
    across fork+exec, so it is only the fallback."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(run_dir: Path, workers: int) -> dict[str, float]:
    with tuned_for_run():  # as `regen run` does before it resumes
        before = _peak_rss_mb()
        start = time.perf_counter()
        store = RunStore(run_dir, worker_index=0, num_workers=workers, keep_fields=())
        state = store.open()
        elapsed = time.perf_counter() - start
        peak = _peak_rss_mb()
        store.close()
    return {
        "open_s": round(elapsed, 3),
        "peak_rss_mb": round(peak, 1),
        "rss_before_open_mb": round(before, 1),
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "done_ids": len(state.done),
        "done_set_mb": round(state.done.nbytes / 1e6, 2),
        "recovered_rows": state.recovered_rows,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--part-rows", type=int, default=10_000)
    parser.add_argument("--journal-rows", type=int, default=5_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="RUN_DIR to create (default: a temporary directory)")
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_only:
        print(json.dumps(measure(args.dir, args.workers)))
        return
    run_dir = args.dir or Path(tempfile.mkdtemp(prefix="regen-bench-")) / "run"
    start = time.perf_counter()
    synthesise(run_dir, args.rows, args.part_rows, args.journal_rows)
    built = time.perf_counter() - start
    cmd = [sys.executable, str(Path(__file__).resolve()), "--measure-only", "--dir", str(run_dir)]
    child = subprocess.run([*cmd, "--workers", str(args.workers)], capture_output=True, text=True, check=True)
    result = {"rows": args.rows, "run_dir": str(run_dir), "synthesise_s": round(built, 1)}
    result.update(json.loads(child.stdout))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
