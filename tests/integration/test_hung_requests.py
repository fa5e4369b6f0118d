"""Hung requests at scaled time (issue 20, problem 2): a server that holds 5% of requests forever while /health
stays 200 and every other request completes. Each is given up after a deadline derived from the endpoint's own
decode rate (engine/deadline.py), aborted on the server and retried, so the run ends instead of waiting
request_timeout_s for each: here an hour, past the test's own time limit, so a run that ends at all proves it, on
any machine load (no wall-clock bound decides the verdict)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers import assert_exactly_once, write_config, write_prompts
from tests.helpers.processes import SimProcess, regen

SIM = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300")
# Requests of ~0.3-1 s; every timeout scaled with them: request_timeout_s 60 stands for an hour.
CLIENT = "request_timeout_s = 3600\nhang_floor_s = 1.0\nhang_slack = 3.0\n"


def _timed_run(tmp_path: Path, url: str) -> tuple[float, Path]:
    tmp_path.mkdir()
    ids = write_prompts(tmp_path / "prompts.jsonl", n=80)
    cfg = write_config(tmp_path, url, max_tokens=900)
    cfg.write_text(cfg.read_text().replace("[client]\n", "[client]\n" + CLIENT))
    start = time.monotonic()
    done = regen("run", str(cfg), "--no-progress", timeout=200)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert_exactly_once(tmp_path / "run", ids)
    return elapsed, tmp_path / "run"


def test_hung_requests_are_aborted_and_retried_long_before_the_request_timeout(tmp_path: Path, sim) -> None:
    rate = ("--decode-rate", "4000", "--max-running-requests", "16")
    hanging: SimProcess = sim(*SIM, *rate, "--fail-hang", "0.05")
    with_hangs, run = _timed_run(tmp_path / "hangs", hanging.url)  # ends: no hang waited request_timeout_s (1 h)
    stats = hanging.stats()
    assert stats["faults"].get("hang", 0) >= 3  # the fault really happened
    print(f"with 5% hangs {with_hangs:.1f} s, hangs {stats['faults'].get('hang')}")
    assert stats["in_flight"] == 0  # every hung request was aborted on the server, none left holding a slot
    rejects = regen("status", str(run), "--json").stdout
    assert '"exhausted_retries"' not in rejects  # a hang is retried, it never costs the prompt its attempts
