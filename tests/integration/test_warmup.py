"""A server still warming up at start (`/health` 503 while it loads weights) is not configuration drift: it starts
down, is probed, passes preflight once ready, and takes the run's work."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SimProcess, regen
from tests.helpers import SIM_FLAGS, assert_exactly_once, write_config, write_prompts


def test_a_server_warming_up_at_start_joins_once_ready(tmp_path: Path, sim) -> None:
    server: SimProcess = sim(*SIM_FLAGS, "--warmup", "2")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=30)
    cfg = write_config(tmp_path, server.url)
    cfg.write_text(cfg.read_text().replace("[client]\n", "[client]\nhealth_interval_s = 0.5\n"))
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "warming up" in done.stderr  # said, not hidden
    good, _ = assert_exactly_once(tmp_path / "run", ids)
    assert len(good) == 30
