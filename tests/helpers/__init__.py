"""What the tests share: the simulator flags most runs use, a config and prompts file for a run, the one
exactly-once check of a RUN_DIR (tests/helpers/exactly_once.py), and `wait_until`, the poll tests synchronise with
(on state, never on a sleep).

Tests share this package and the fixtures of tests/conftest.py, never another test module or a conftest
(tests/test_tests_layout.py): a builder two test files need lives in a module here, under a public name.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import orjson

from tests.helpers.exactly_once import assert_exactly_once

__all__ = ["PROMPTS", "SIM_FLAGS", "assert_exactly_once", "wait_until", "write_config", "write_prompts"]

PROMPTS = 120


def write_prompts(path: Path, n: int = PROMPTS, bad: bool = False) -> list[str]:
    ids = []
    with open(path, "wb") as fh:
        for i in range(n):
            pid = f"p{i:04d}"
            ids.append(pid)
            row = {"id": pid, "prompt": f"Question {i}: what is {i} times {i + 3}?", "topic": ["math", "code"][i % 2]}
            if i % 3 == 0:
                row = {"id": pid, "messages": [{"role": "user", "content": f"Explain idea number {i}."}], "topic": "x"}
            fh.write(orjson.dumps(row) + b"\n")
        if bad:
            fh.write(b'{"id": "bad-empty", "prompt": ""}\n')
            fh.write(b'{"id": "bad-role", "messages": [{"content": "no role"}]}\n')
            fh.write(b"{not json\n")
    return ids


def write_config(tmp_path: Path, url: str, extra: str = "", **gen: object) -> Path:
    max_tokens = gen.get("max_tokens", 4096)
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[input]
path = "{tmp_path / "prompts.jsonl"}"
keep_fields = ["topic"]

[output]
dir = "{tmp_path / "run"}"
shard_rows = 50
sync_interval_s = 0.2

[generation]
model = "Qwen3.6-27B"
max_tokens = {max_tokens}

[client]
max_attempts = 4
backoff_base_s = 0.01
backoff_max_s = 0.05

[[endpoints]]
url = "{url}"
concurrency = 16
{extra}
"""
    )
    return cfg


SIM_FLAGS = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "300")


T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], what: str, *, timeout: float = 60, alive: subprocess.Popen | None = None
) -> T:
    """Poll `condition` until it returns something true, and return that. Fails naming `what` after `timeout`
    seconds (a bound on a hang, never the thing tested), or at once when the `alive` process has ended first."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"the process ended (exit {alive.returncode}) before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value
