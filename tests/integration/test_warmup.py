"""A server still warming up at start (`/health` 503 while it loads weights) is not configuration drift: it starts
down, is probed, passes preflight once ready, and takes the run's work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.helpers import SIM_FLAGS, assert_exactly_once, wait_until, write_config, write_prompts
from tests.helpers.paths import ROOT
from tests.helpers.processes import SimProcess


def test_a_server_warming_up_at_start_joins_once_ready(tmp_path: Path, sim) -> None:
    """The server stays in warm-up (/health 503) until the run has been seen waiting on it (two 503 probes), then is
    made ready: synchronised on the server's state, whatever the machine's load makes of the run's start-up."""
    server: SimProcess = sim(*SIM_FLAGS, "--warmup", "600")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=30)
    cfg = write_config(tmp_path, server.url)
    cfg.write_text(cfg.read_text().replace("[client]\n", "[client]\nhealth_interval_s = 0.5\n"))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(lambda: server.stats()["health_probes"]["503"] >= 2, "the run probing a server warming up",
                   timeout=120, alive=proc)  # fmt: skip
        assert server.stats()["generations_total"] == 0  # nothing sent to a server warming up
        httpx.post(f"{server.url}/_sim/ready", timeout=10)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "warming up" in err  # said, not hidden
    good, _ = assert_exactly_once(tmp_path / "run", ids)
    assert len(good) == 30
