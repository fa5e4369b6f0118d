"""Infrastructure failures are not data (issue 20, problem 4): a server that starts answering 503 to everything, or
a 400 that every prompt gets, stops the run with exit 3 and the prompts pending, not rejected; a later run against
a working server finishes them exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_config, write_prompts
from tests.helpers.processes import SimProcess, regen


def _reasons(run_dir: Path) -> Counter[str]:
    paths = sorted((run_dir / "rejects").glob("*.parquet"))
    return Counter(r for p in paths for r in pq.read_table(p, columns=["reason"]).column("reason").to_pylist())


def _config(tmp_path: Path, url: str) -> Path:
    cfg = write_config(tmp_path, url)
    text = cfg.read_text().replace("[client]\n", "[client]\nfailure_window = 20\n")
    cfg.write_text(text)
    return cfg


def test_a_server_that_fails_everything_mid_run_stops_the_run_and_rejects_nothing(tmp_path: Path, sim) -> None:
    broken: SimProcess = sim(*SIM_FLAGS, "--fail-503-after", "60")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=300)
    cfg = _config(tmp_path, broken.url)
    stopped = regen("run", str(cfg), "--no-progress")
    assert stopped.returncode == 3, stopped.stderr
    assert "of the last 20 requests failed" in stopped.stderr and "queue is full" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    run = tmp_path / "run"
    reasons = _reasons(run)
    assert reasons["exhausted_retries"] <= 8  # at most the prompts in flight when the circuit opened
    assert sum(reasons.values()) == reasons["exhausted_retries"]  # the validators rejected nothing that was fine
    status = regen("status", str(run), "--json")
    assert '"pending": ' in status.stdout and 'pending": 0' not in status.stdout

    healthy: SimProcess = sim(*SIM_FLAGS)
    resumed = regen("run", str(cfg), "--no-progress", "--endpoint", healthy.url)
    assert resumed.returncode == 0, resumed.stderr
    good, bad = assert_exactly_once(run, ids)
    assert bad == [] and len(good) == 300  # transport rejects were retried without --retry-rejects


def test_a_400_for_every_prompt_is_the_config_not_the_data(tmp_path: Path, sim) -> None:
    server: SimProcess = sim(*SIM_FLAGS, "--context-length", "64")  # every request's max_tokens exceeds it
    write_prompts(tmp_path / "prompts.jsonl", n=100)
    stopped = regen("run", str(_config(tmp_path, server.url)), "--no-progress", "--skip-preflight")
    assert stopped.returncode == 3, stopped.stderr
    # the server's own 400, named with its status: not a port number or a count that happens to hold "400"
    assert "20 of the last 20 requests failed" in stopped.stderr, stopped.stderr
    assert f"{server.url}: HTTP 400: max_completion_tokens is too large" in stopped.stderr, stopped.stderr
    assert _reasons(tmp_path / "run")["http_4xx"] == 0
