"""A run over several simulators, started as a subprocess and watched while it runs: `config` (endpoints, health
checks and client settings as TOML), `start_run` and `wait_for`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.paths import ROOT

HEALTH = "health_interval_s = 0.5\nhealth_timeout_s = 1.0\nhealth_failures = 2\n"


def config(tmp_path: Path, urls: list[str], extra: str = "", client: str = "", health: str = HEALTH) -> Path:
    eps = "".join(f'[[endpoints]]\nurl = "{u}"\nconcurrency = 8\n' for u in urls)
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'{extra}\n[input]\npath = "{tmp_path / "prompts.jsonl"}"\n'
        f'[output]\ndir = "{tmp_path / "run"}"\nshard_rows = 100\nsync_interval_s = 0.2\n'
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 4096\n'
        "[client]\nmax_attempts = 4\nbackoff_base_s = 0.02\nbackoff_max_s = 0.5\nrequest_timeout_s = 60\n"
        f"{health}{client}\n{eps}"
    )
    return cfg


def start_run(cfg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress", "--skip-preflight"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)
