"""The repaired export's memory at two sizes, without generating (issue 40): a seed-shaped original
(`pipeline.store.synthetic.seed_dataset`) and a run directory written straight as Parquet parts, each row's turns
as many as its `gpt` turns (3,000-character reasoning, a 600-character answer), 10,000-row parts of 512-row groups
as a run writes them. Then `regen export --format repaired` of each, timed with `/usr/bin/time` (the command's own
peak RSS).

    python scripts/bench_repair.py --sizes 90000,902000
    python scripts/bench_repair.py --sizes 90000,902000 --root /tmp/old   # another checkout's export, same data
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from pipeline.config import Config, InputConfig  # noqa: E402
from pipeline.store.synthetic import seed_dataset  # noqa: E402

PART_ROWS, GROUP_ROWS = 10_000, 512


def build(work: Path, rows: int) -> tuple[Path, Path]:
    original = work / f"seed-{rows}.jsonl"
    seed_dataset(original, rows)
    run = work / f"run-{rows}"
    (run / "shards").mkdir(parents=True)
    (run / "rejects").mkdir()
    (run / "run.json").write_bytes(orjson.dumps({"config": Config(input=InputConfig(path=str(original))).to_dict()}))
    reasoning = ("Let me think this through step by step. " * 80)[:3000]
    batch: list[dict[str, object]] = []
    with open(original, "rb") as fh:
        for n, line in enumerate(fh):
            row = orjson.loads(line)
            rounds = sum(t["from"] == "gpt" for t in row["conversations"])
            answer = f"The answer to {row['id']} is " + "x" * 580
            turn = {"reasoning": reasoning, "answer": answer, "endpoint": "http://127.0.0.1:30000"}
            batch.append({"id": row["id"], "turns": [turn] * rounds})
            if len(batch) == PART_ROWS:
                _write(run, n // PART_ROWS, batch)
                batch = []
    if batch:
        _write(run, rows // PART_ROWS, batch)
    return original, run


def _write(run: Path, index: int, batch: list[dict[str, object]]) -> None:
    path = run / "shards" / f"part-w0-{index:05d}.parquet"
    pq.write_table(pa.Table.from_pylist(batch), path, row_group_size=GROUP_ROWS, compression="zstd")


def export(root: Path, original: Path, run: Path, out: Path) -> dict[str, float]:
    stats = out.with_suffix(".time")
    env = {**os.environ, "PYTHONPATH": str(root)}
    argv = [sys.executable, "-m", "pipeline", "export", str(run), "--format", "repaired", "--original", str(original)]
    done = subprocess.run(
        ["/usr/bin/time", "-o", str(stats), "-f", "%e %M", *argv, "--out", str(out)],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    wall, kb = stats.read_text().split()[-2:]
    return {"wall_s": float(wall), "rss_mb": round(int(kb) / 1024, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="90000,902000")
    ap.add_argument("--root", type=Path, default=HERE, help="the checkout whose export is measured")
    args = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="regen-repair-") as tmp:
        for rows in (int(n) for n in args.sizes.split(",")):
            original, run = build(Path(tmp), rows)
            out[rows] = export(args.root.resolve(), original, run, Path(tmp) / f"out-{rows}")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
