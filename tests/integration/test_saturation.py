"""A saturated pool is not a dead pool (issue 20, problem 0), at scaled time.

Three 16-slot simulators with requests of ~1 s are kept full; one answers 3% of requests with 503, another
restarts once (same args, port closed for 1.5 s). `no_endpoint_timeout_s` is 2 s, twice a request: the wait for a
free slot on healthy endpoints must never count against it, and retries must not starve behind new prompts. The
run ends with exit 0, every id exactly once, and the healthy servers' slots busy while work was pending.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from tests.conftest import regen
from tests.helpers import SIM_FLAGS, assert_exactly_once, write_prompts

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
    """Samples `num_running_reqs` of some servers every 50 ms while the run still has work to hand out."""

    def __init__(self, urls: list[str], all_urls: list[str], stop_after: int):
        self.urls, self.all_urls, self.stop_after = urls, all_urls, stop_after
        self.samples: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _running(self, client: httpx.Client, url: str) -> int:
        loads = client.get(f"{url}/v1/loads", timeout=2).json()["loads"]
        return sum(min(SLOTS, r["num_running_reqs"]) for r in loads)

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
                running = [self._running(client, url) for url in self.urls]
                started = started or all(r == SLOTS for r in running)  # from the first full batch on
                if started:
                    self.samples.append(sum(running) / (SLOTS * len(self.urls)))
                time.sleep(0.05)

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)


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
    assert occupancy.mean >= 0.98, occupancy.samples
