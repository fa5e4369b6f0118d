"""Endpoints that fail (issue 5): throughput with all alive vs one dead, and the generations wasted when one is
killed, frozen, or flaky."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx

from benchlib import Sim, steady_rate, timed, write_config, write_prompts


class _StatsWatcher:
    """Keeps each simulator's latest per-prompt generation counts, also of one that dies mid-run."""

    def __init__(self, sims: list[Sim]):
        import threading

        self.sims, self.last = sims, {s.url: {} for s in sims}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        for s in self.sims:
            try:
                self.last[s.url] = s.stats()["generations"]
            except (httpx.HTTPError, OSError):
                pass

    def _loop(self) -> None:
        while not self._stop.wait(0.3):
            self._poll()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()


def bench_endpoints(work: Path, requests: int) -> dict[str, Any]:
    """Three servers with a capacity model: throughput with all alive vs one dead from the start, and the wasted
    generations (the simulators' duplicate counts) when one is killed, frozen, or flaky."""
    base = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300"]
    base += ["--max-running-requests", "16", "--decode-rate", "15000"]
    scenarios = {
        "all_alive": [[], [], []],
        "one_dead": [[], [], None],
        "one_killed_mid_run": [[], [], ["--die-after", str(requests // 6)]],
        "flaky_500_503": [[], [], ["--fail-500", "0.05", "--fail-503", "0.05"]],
        "resets_invalid_json": [[], [], ["--fail-reset", "0.05", "--fail-invalid-json", "0.05"]],
    }
    out: dict[str, Any] = {}
    prompts = work / "endpoints.jsonl"
    write_prompts(prompts, requests)
    for name, extras in scenarios.items():
        sims = [Sim(*base, "--seed", str(i), *extra) for i, extra in enumerate(extras) if extra is not None]
        urls = [s.url for s in sims] + (["http://127.0.0.1:9"] if None in extras else [])  # a port nobody serves
        watcher = _StatsWatcher(sims)
        try:
            cfg = write_config(work, urls, 20, prompts, client="health_interval_s = 1\nhealth_timeout_s = 2\n")
            run = timed([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress", "--skip-preflight"])
            _, tok_rate, rows, _ = steady_rate(work / f"run-{cfg.stem}")
        finally:
            watcher.stop()
            for s in sims:
                s.stop()
        per_prompt: dict[str, int] = {}
        for gens in watcher.last.values():  # a prompt generated on two servers is waste too
            for key, n in gens.items():
                per_prompt[key] = per_prompt.get(key, 0) + n
        out[name] = {
            "rows": rows,
            "tokens_per_s": round(tok_rate),
            "wall_s": round(run["wall_s"], 1),
            "wasted_generations": sum(n - 1 for n in per_prompt.values() if n > 1),
        }
    out["one_dead_vs_all_alive"] = round(out["one_dead"]["tokens_per_s"] / out["all_alive"]["tokens_per_s"], 2)
    return out
