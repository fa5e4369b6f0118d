"""Benchmark `regen audit` on a generated JSONL dataset of ~7 KB rows (docs/audit.md, "Speed and memory").

    python3 scripts/bench_audit.py --rows 100000 --row-bytes 7000 --file /tmp/audit-bench.jsonl

Writes the file once (two-turn conversations with `reasoning_content`, a `source` column, ~5% of rows with a
planted defect), then runs `python3 -m pipeline audit FILE --by source --json --ids-out IDS` in a child process and
prints rows/s, wall time and the child's peak RSS (ru_maxrss). `--profile OUT` runs the audit under cProfile instead
and prints the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
WORDS = "the a model answer reason step because therefore value check result first then so we it is of".split()


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def make_rows(path: Path, rows: int, row_bytes: int, seed: int = 0) -> None:
    """`rows` JSONL rows of about `row_bytes` bytes each; 1 in 20 with an empty second answer."""
    rng = random.Random(seed)
    part = max(row_bytes // 8, 20)  # 2 turns x (question, reasoning 2 parts, answer 1 part) ~ 8 parts
    with path.open("wb") as fh:
        for i in range(rows):
            messages = []
            for k in range(2):
                broken = k == 1 and i % 20 == 0
                messages.append({"role": "user", "content": _text(rng, part // 2)})
                messages.append(
                    {
                        "role": "assistant",
                        "content": "" if broken else _text(rng, part),
                        "reasoning_content": _text(rng, 2 * part + part // 2),
                    }
                )
            row = {"id": f"row-{i}", "source": ("forum", "support", "tutoring")[i % 3], "messages": messages}
            fh.write(orjson.dumps(row) + b"\n")


def _tree_rss_kb(pid: int) -> int:
    """VmRSS of a process and its descendants, from /proc (Linux)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def _watch(child: subprocess.Popen[bytes], peak: list[int]) -> None:
    while child.poll() is None:
        peak[0] = max(peak[0], _tree_rss_kb(child.pid))
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--row-bytes", type=int, default=7000)
    parser.add_argument("--file", type=Path, default=Path("/tmp/audit-bench.jsonl"))
    parser.add_argument("--profile", type=Path, help="run under cProfile, write the stats here")
    parser.add_argument("--regenerate", action="store_true", help="write the file even if it exists")
    parser.add_argument("audit_args", nargs="*", help="extra arguments for regen audit (after --)")
    args = parser.parse_args()
    if args.regenerate or not args.file.exists():
        started = time.perf_counter()
        make_rows(args.file, args.rows, args.row_bytes)
        print(f"wrote {args.file} ({args.file.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f}s")
    ids = args.file.with_suffix(".ids.txt")
    audit = ["audit", str(args.file), "--by", "source", "--json", "--ids-out", str(ids), *args.audit_args]
    if args.profile:
        cmd = [sys.executable, "-m", "cProfile", "-o", str(args.profile), "-m", "pipeline", *audit]
    else:
        cmd = [sys.executable, "-m", "pipeline", *audit]
    started = time.perf_counter()
    child = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    peak = [0]
    watcher = threading.Thread(target=_watch, args=(child, peak), daemon=True)
    watcher.start()
    stdout, stderr = child.communicate()
    wall = time.perf_counter() - started
    done = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
    if done.returncode not in (0, 1):
        print(done.stderr.decode(), file=sys.stderr)
        return 1
    report = json.loads(done.stdout)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"{report['rows']} rows, {report['failing_rows']} failing: audit {report['elapsed_s']:.2f}s "
        f"({report['rows_per_s']:,.0f} rows/s), wall {wall:.2f}s, peak RSS {rss:.0f} MB in one process, "
        f"{peak[0] / 1024:.0f} MB summed over the audit and its workers (sampled every 50 ms)"
    )
    if args.profile:
        import pstats

        pstats.Stats(str(args.profile)).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
