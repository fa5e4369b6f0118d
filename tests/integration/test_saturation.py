"""A saturated pool is not a dead pool (issue 20, problem 0), at scaled time.

Three 16-slot simulators with requests of ~1 s are kept full; one answers 3% of requests with 503, another
restarts once (same args, port closed for 1.5 s). `no_endpoint_timeout_s` is 2 s, twice a request: the wait for a
free slot on healthy endpoints must never count against it, and retries must not starve behind new prompts. The
run ends with exit 0, every id exactly once, the healthy servers never marked down, and their slots refilled while
work was pending.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import orjson

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_prompts
from tests.helpers.processes import regen

SLOTS = 16
# 300-token completions at 4,800 tok/s shared by 16 slots: ~1 s each.
BUSY = ("--max-running-requests", str(SLOTS), "--decode-rate", "4800")


def config(tmp_path: Path, urls: list[str], concurrency: int = 0) -> Path:
    eps = "".join(f'[[endpoints]]\nurl = "{u}"\nconcurrency = {concurrency}\n' for u in urls)
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'[input]\npath = "{tmp_path / "prompts.jsonl"}"\n'
        f'[output]\ndir = "{tmp_path / "run"}"\nshard_rows = 200\nsync_interval_s = 0.2\n'
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 4096\n'
        "[client]\nmax_attempts = 4\nbackoff_base_s = 0.05\nbackoff_max_s = 0.5\nrequest_timeout_s = 30\n"
        "connect_timeout_s = 0.5\nhealth_interval_s = 0.5\nhealth_timeout_s = 1.0\nhealth_failures = 2\n"
        f"no_endpoint_timeout_s = 2.0\n{eps}"
    )
    return cfg


class Occupancy:
    """Samples `num_running_reqs` and `num_waiting_reqs` of some servers every 50 ms while the run still has work
    to hand out, each sample with its time."""

    def __init__(self, urls: list[str], all_urls: list[str], stop_after: int):
        self.urls, self.all_urls, self.stop_after = urls, all_urls, stop_after
        self.samples: list[float] = []
        self.free: list[tuple[float, bool]] = []  # (time, some server had a free slot and nothing queued)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _load(self, client: httpx.Client, url: str) -> tuple[int, int]:
        loads = client.get(f"{url}/v1/loads", timeout=2).json()["loads"]
        return sum(min(SLOTS, r["num_running_reqs"]) for r in loads), sum(r["num_waiting_reqs"] for r in loads)

    def _generations(self, client: httpx.Client) -> int:
        total = 0
        for url in self.all_urls:
            try:
                total += client.get(f"{url}/_sim/stats", timeout=2).json()["generations_total"]
            except httpx.HTTPError:
                pass  # the restarting server
        return total

    def _run(self) -> None:
        with httpx.Client() as client:
            started = False
            while not self.done.is_set() and self._generations(client) < self.stop_after:
                loads = [self._load(client, url) for url in self.urls]
                running = [r for r, _ in loads]
                started = started or all(r == SLOTS for r in running)  # from the first full batch on
                if started:
                    self.samples.append(sum(running) / (SLOTS * len(self.urls)))
                    self.free.append((time.monotonic(), any(r < SLOTS and w == 0 for r, w in loads)))
                time.sleep(0.05)

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)

    def longest_idle_s(self) -> float:
        """The longest stretch of consecutive samples in which a server had a free slot and nothing queued."""
        longest, since = 0.0, None
        for t, free in self.free:
            if free and since is None:
                since = t
            elif not free and since is not None:
                longest, since = max(longest, t - since), None
        return longest


def _endpoint_states(run_dir: Path, urls: list[str]) -> set[str]:
    """Every state regen's metrics snapshots gave these endpoints while prompts were pending."""
    snaps = [orjson.loads(line) for line in (run_dir / "metrics" / "worker-0.jsonl").read_bytes().splitlines()]
    return {s["endpoints"][u]["state"] for s in snaps if s["pending"] and s["endpoints"] for u in urls}


def test_503s_and_a_restart_on_saturated_servers_do_not_end_the_run(tmp_path: Path, sim) -> None:
    steady = sim(*SIM_FLAGS, *BUSY, "--seed", "1")
    flaky = sim(*SIM_FLAGS, *BUSY, "--seed", "2", "--fail-503", "0.03")
    restarting = sim(*SIM_FLAGS, *BUSY, "--seed", "3", "--down-after", "100", "--down-for", "1.5")
    n = 480
    ids = write_prompts(tmp_path / "prompts.jsonl", n=n)
    urls = [steady.url, flaky.url, restarting.url]
    occupancy = Occupancy([steady.url, flaky.url], urls, stop_after=n - 3 * 2 * SLOTS)
    occupancy.thread.start()
    try:
        result = regen("run", str(config(tmp_path, urls)), "--no-progress", timeout=120)
    finally:
        occupancy.done.set()
        occupancy.thread.join()
    assert result.returncode == 0, result.stderr
    assert_exactly_once(tmp_path / "run", ids)
    assert restarting.stats()["faults"].get("down") == 1  # the restart happened during the run
    assert len(occupancy.samples) >= 20, occupancy.samples
    print(
        "occupancy",
        round(occupancy.mean, 4),
        len(occupancy.samples),
        min(occupancy.samples),
        restarting.stats()["responses"],
        flaky.stats()["faults"],
    )
    # Saturated is not dead: the healthy servers were never marked anything but healthy (regen's own snapshots),
    # and a slot they freed was refilled (or already queued for) within half a request (~1 s each), not after the
    # several requests a pool that stopped sending takes to ramp back. A state sampled, not a share of wall time.
    states = _endpoint_states(tmp_path / "run", [steady.url, flaky.url])
    assert states == {"healthy"}, states
    assert occupancy.longest_idle_s() < 0.5, occupancy.free
