"""Scenario 4, startup: launch to the first request a simulator sees."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib import ROOT, Sim, write_config, write_prompts


def bench_startup(work: Path) -> dict[str, Any]:
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3")
    try:
        prompts = work / "startup.jsonl"
        write_prompts(prompts, 100)
        cfg = write_config(work, [sim.url], 8, prompts)
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"], cwd=ROOT)
        first = None
        with httpx.Client(timeout=5) as client:
            while time.monotonic() - t0 < 30:
                if client.get(f"{sim.url}/_sim/stats").json()["requests"] > 0:
                    first = time.monotonic() - t0
                    break
                time.sleep(0.005)
        proc.wait()
    finally:
        sim.stop()
    return {"launch_to_first_request_s": round(first or -1, 3), "targets": {"<1.5s": first is not None and first < 1.5}}
