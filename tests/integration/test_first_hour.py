"""The first hour of a real job (issue 28): a new user's config against real datasets and real simulators.

The real CLI as a subprocess, the simulator over HTTP on 127.0.0.1, the public datasets in ../shared/datasets/
(read where they are, never copied).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.conftest import ROOT, regen
from tests.integration.test_run import SIM_FLAGS, write_config

DATASETS = ROOT.parent / "shared" / "datasets"
SHAREGPT = DATASETS / "fastchat_dummy_conversation.json"
SEED_CONFIG = ROOT / "configs" / "qwen36-27b-mtp.toml"


def test_the_seed_config_on_a_sharegpt_file_stops_before_sending_anything(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    out = tmp_path / "run"
    result = regen("run", str(SEED_CONFIG), "--input", str(SHAREGPT), "--output", str(out), "--endpoint",
                   server.url, "--no-progress")  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "500 of the first 500 rows cannot be read (bad_input); nothing was sent" in result.stderr
    assert 'fix: input.messages_field = "auto"' in result.stderr and "conversations (ShareGPT)" in result.stderr
    assert f"regen init {SHAREGPT}" in result.stderr
    assert server.stats()["requests"] == 0  # not even a preflight probe
    assert not out.exists()  # nothing written


def _mixed(path: Path, good: int, bad: int) -> None:
    with open(path, "wb") as fh:
        for i in range(good + bad):
            row = {"id": f"r{i}", "prompt": f"What is {i} + 1?"} if i < good else {"id": f"r{i}", "text": "?"}
            fh.write(orjson.dumps(row) + b"\n")


def test_a_run_in_which_every_row_is_refused_never_exits_0(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    _mixed(tmp_path / "prompts.jsonl", good=0, bad=20)
    result = regen("run", str(write_config(tmp_path, server.url)), "--no-progress", "--set", "input.max_bad_share=1")
    assert result.returncode == 2, result.stderr
    assert "every row was refused (bad_input)" in result.stderr
    assert "20 of 20 rows (100%) were refused as bad_input" in result.stderr


def test_a_large_refused_share_is_a_warning_in_the_summary(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    _mixed(tmp_path / "prompts.jsonl", good=14, bad=6)
    result = regen("run", str(write_config(tmp_path, server.url)), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "warning: 6 of 20 rows (30%) were refused as bad_input and never sent" in result.stderr
