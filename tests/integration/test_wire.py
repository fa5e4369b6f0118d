"""The wire at run scale: `regen run` against a simulator that closes every connection right after its response,
without saying so (a gateway that drops kept-alive connections). Every request then meets either a fresh connection
or a stale one; a stale one is retried once on a fresh connection, so the run ends with nothing rejected and the
endpoint never marked down."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from tests.helpers.exactly_once import committed_ids
from tests.helpers.processes import regen

FLAGS = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "200")


def test_a_server_closing_every_connection_costs_no_request(tmp_path: Path, sim) -> None:
    server = sim(*FLAGS, "--close-connections")
    ids = [f"p{i:04d}" for i in range(300)]
    (tmp_path / "prompts.jsonl").write_bytes(
        b"".join(orjson.dumps({"id": pid, "prompt": f"Question {pid}"}) + b"\n" for pid in ids)
    )
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'[input]\npath = "{tmp_path / "prompts.jsonl"}"\n'
        f'[output]\ndir = "{tmp_path / "run"}"\nsync_interval_s = 0.2\n'
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 2048\n'
        "[client]\nbackoff_base_s = 0.01\nbackoff_max_s = 0.05\nhealth_interval_s = 0.2\n"
        f'[[endpoints]]\nurl = "{server.url}"\nconcurrency = 16\n'
    )
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert sorted(committed_ids(tmp_path / "run", "shards")) == ids  # all accepted, each once
    assert committed_ids(tmp_path / "run", "rejects") == []
    assert ": down (" not in result.stderr
    assert re.search(r"endpoint \S+: 300 ok, 0 errors, state healthy", result.stderr), result.stderr
    served = server.stats()
    assert sorted(served["generations"].values()) == [1] * 300  # no prompt generated twice
