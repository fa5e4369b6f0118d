#!/usr/bin/env python3
"""regen benchmarks, each reported as a ratio against a baseline measured in the same run.

    python scripts/bench.py                       # overhead, saturation, startup (a few minutes)
    python scripts/bench.py --only scale          # the seed's job at 90K and 902K rows, every command (issue 40, ~1 h)
    python scripts/bench.py --only scale --scale-sizes 20000,90000   # its quick version (~5 min)
    python scripts/bench.py --only overhead --requests 20000
    python scripts/bench.py --rehearsal           # + the 902,000-prompt dress rehearsal (long)
    python scripts/bench.py --only prefix         # conversation-sticky routing vs placement by load (issue 14)
    python scripts/bench.py --only soak --minutes 20   # four 64-slot servers at real durations, compressed (issue 17)
    python scripts/bench.py --only loops          # 3% looping generations: the loop guard on vs off (issue 25)
    python scripts/bench.py --json out.json

Scenarios (issue 8): 1 client overhead vs a minimal aiohttp loop; 2 scale: every command's wall time and peak RSS
over the seed-shaped job at two sizes, with their ratio (issue 40); 3 saturation of
4 simulators with a capacity model, one dying mid-run, and the exit lag after the last completion; 4 launch to
first request; 5 the dress rehearsal. The simulator runs pinned to its own core where `taskset` exists.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib.endpoints import bench_endpoints
from benchlib.loops import bench_loops
from benchlib.overhead import bench_overhead
from benchlib.prefix import bench_prefix
from benchlib.rehearsal import bench_rehearsal
from benchlib.saturation import bench_saturation
from benchlib.scale import bench_scale
from benchlib.soak import bench_soak
from benchlib.startup import bench_startup


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--only",
        action="append",
        choices=["overhead", "scale", "saturation", "startup", "endpoints", "prefix", "soak", "loops"],
    )
    ap.add_argument("--minutes", type=float, default=20, help="wall time of the soak scenario (real figures: >= 20)")
    ap.add_argument("--time-factor", type=float, default=10, help="soak: real durations and timeouts / this")
    ap.add_argument("--conversations", type=int, default=1000, help="multi-turn rows in the prefix scenario")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--loop-prompts", type=int, default=1000, help="prompts in the loops scenario")
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=1800, help="mean completion tokens in the overhead scenario")
    ap.add_argument(
        "--scale-sizes", default="90000,902000", help="scale: dataset sizes, comma-separated (quick: 20000,90000)"
    )
    ap.add_argument("--scale-tokens", type=int, default=1818, help="scale: mean completion tokens (the seed's 1,818)")
    ap.add_argument(
        "--scale-keep", type=Path, help="scale: keep each size's run and dataset in DIR/seed-N (hard links)"
    )
    ap.add_argument(
        "--scale-after", type=Path, help="scale: no run; the commands after it on a --scale-keep DIR's runs"
    )
    ap.add_argument("--rehearsal", type=int, nargs="?", const=902_000, metavar="N", help="dress rehearsal, N prompts")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    # Bytecode for the package, as a pip install writes it: with PYTHONDONTWRITEBYTECODE set (many images set it) an
    # editable checkout would otherwise compile ~200 modules from source at every start, ~0.1 CPU-s per run.
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "pipeline", quiet=1)
    work = Path(tempfile.mkdtemp(prefix="regen-bench-"))
    wanted = args.only or ["overhead", "saturation", "startup"]
    if args.rehearsal:
        wanted = [*(args.only or []), "rehearsal"]
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    for name in wanted:
        if name == "overhead":
            results[name] = bench_overhead(work, args.requests, args.concurrency, args.tokens)
        elif name == "scale":
            sizes = [int(n) for n in args.scale_sizes.split(",")]
            results[name] = bench_scale(work, sizes, args.scale_tokens, keep=args.scale_keep, after=args.scale_after)
        elif name == "saturation":
            results[name] = bench_saturation(work, max(4000, args.requests // 3))
        elif name == "startup":
            results[name] = bench_startup(work)
        elif name == "endpoints":
            results[name] = bench_endpoints(work, 3000)
        elif name == "prefix":
            results[name] = bench_prefix(work, args.conversations)
        elif name == "loops":
            results[name] = bench_loops(work, args.loop_prompts)
        elif name == "soak":
            results[name] = bench_soak(work, args.minutes, args.time_factor)
        elif name == "rehearsal":
            results[name] = bench_rehearsal(work, args.rehearsal, kills=3)
        print(f"## {name}\n" + "\n".join(f"  {k}: {v}" for k, v in results[name].items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    asyncio.run(asyncio.sleep(0))
    raise SystemExit(main())
