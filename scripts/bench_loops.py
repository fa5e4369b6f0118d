#!/usr/bin/env python3
"""The loop detector (pipeline/loops.py) on the real traces of ../shared/traces, read in place:

    python scripts/bench_loops.py [--traces DIR]

Prints the false positives on the 120 normal traces (whole, and streamed in 1-60-character deltas through
LoopGuard), the share of the 80 looping traces caught, the distance from where each repeating run begins (the
trace's `loop_run_chars` from its end) to where the streamed guard flagged it, and the CPU per KB of text.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from pipeline.loops import LoopGuard, find_loop

ROOT = Path(__file__).resolve().parent.parent


def streamed(text: str, rng: random.Random) -> LoopGuard:
    guard, i = LoopGuard(), 0
    while i < len(text) and guard.loop is None:
        k = rng.randint(1, 60)
        guard.feed(text[i : i + k])
        i += k
    guard.check()
    return guard


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    args = ap.parse_args()
    normal = [json.loads(line) for line in open(args.traces / "normal.jsonl", encoding="utf-8")]
    looping = [json.loads(line) for line in open(args.traces / "looping.jsonl", encoding="utf-8")]
    rng = random.Random(0)
    fp_whole = sum(bool(find_loop(r["reasoning"]) or find_loop(r["answer"])) for r in normal)
    fp_stream = sum(bool(streamed(r["reasoning"], rng).loop or streamed(r["answer"] or "", rng).loop) for r in normal)
    distances = []
    for r in looping:
        guard = streamed(r["reasoning"], rng)
        if guard.loop is not None:
            distances.append(guard.chars - (len(r["reasoning"]) - r["loop_run_chars"]))
    within = sum(d <= 6000 for d in distances)
    texts = [r["reasoning"] for r in normal]
    chars = sum(len(t) for t in texts)
    t0 = time.process_time()
    for t in texts:
        find_loop(t)
    whole_us = (time.process_time() - t0) / chars * 1024 * 1e6
    t0 = time.process_time()
    for t in texts:
        guard = LoopGuard()
        for i in range(0, len(t), 16):
            guard.feed(t[i : i + 16])
    guard_us = (time.process_time() - t0) / chars * 1024 * 1e6
    out = {
        "normal_traces": len(normal),
        "false_positives_whole": fp_whole,
        "false_positives_streamed": fp_stream,
        "looping_traces": len(looping),
        "caught": len(distances),
        "caught_within_6000_chars": within,
        "share_caught_within_6000": round(within / len(looping), 4),
        "distance_chars_median": statistics.median(distances),
        "distance_chars_p90": sorted(distances)[int(0.9 * len(distances)) - 1],
        "distance_chars_max": max(distances),
        "cpu_us_per_kb_whole_text": round(whole_us, 2),
        "cpu_us_per_kb_streamed_16_char_deltas": round(guard_us, 2),
    }
    print("\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0 if fp_whole == fp_stream == 0 and within >= 0.9 * len(looping) else 1


if __name__ == "__main__":
    raise SystemExit(main())
