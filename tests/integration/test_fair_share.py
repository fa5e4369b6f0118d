"""Workers that share a server share it fairly (issue 17): two workers with automatic concurrency on one
simulator with 16 slots never put more than 16 + the queue allowance (2) in flight there, give or take the one
request per worker a moment's stale read may add (autosize.py), and both finish."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_config, write_prompts
from tests.helpers.paths import ROOT
from tests.helpers.processes import SimProcess


def test_two_automatic_workers_never_oversubscribe_a_shared_server(tmp_path: Path, sim) -> None:
    server: SimProcess = sim(*SIM_FLAGS, "--max-running-requests", "16", "--decode-rate", "6000")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=240)
    cfg = write_config(tmp_path, server.url)
    cfg.write_text(cfg.read_text().replace("concurrency = 16", "concurrency = 0"))
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with httpx.Client(timeout=5) as client:
            while not stop.is_set():
                [load] = client.get(f"{server.url}/v1/loads").json()["loads"]  # the scheduler's own count
                samples.append(load["num_running_reqs"] + load["num_waiting_reqs"])
                time.sleep(0.03)

    sampler = threading.Thread(target=sample)
    sampler.start()
    argv = [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress", "--num-workers", "2"]
    logs = [tmp_path / f"worker-{i}.log" for i in (0, 1)]
    procs = []
    for i, log in enumerate(logs):
        with log.open("wb") as err:
            procs.append(subprocess.Popen([*argv, "--worker-index", str(i)], cwd=ROOT, stderr=err))
    try:
        codes = [p.wait(timeout=180) for p in procs]
    finally:
        stop.set()
        sampler.join()
    assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
    assert_exactly_once(tmp_path / "run", ids)
    busy = [s for s in samples if s > 0]
    # 16 slots + the queue allowance (2) + one per worker: two workers whose /v1/loads reads both fall in a moment
    # when the other is between two requests each grow by one (autosize.py), until their next reads shrink them.
    assert len(busy) > 50 and max(busy) <= 16 + 2 + 2, (max(busy), len(busy))
    assert sum(s >= 14 for s in busy) / len(busy) > 0.5  # and the batch is kept full, not starved
