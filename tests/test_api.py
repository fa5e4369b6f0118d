"""The Python API (`import regen`, pipeline/api.py): a notebook runs a config given as a dict, reads its summary
and rows, audits, exports; inside a running event loop (Jupyter's) too. Against the embedded simulator over HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

import regen
from tests.helpers.paths import ROOT


def _config(tmp_path: Path, n: int = 12) -> dict:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": f"q{i}", "prompt": f"What is {i} + {i}?"}) + b"\n"
                                 for i in range(n)))  # fmt: skip
    return {
        "input": {"path": str(prompts)},
        "output": {"dir": str(tmp_path / "run"), "sync_interval_s": 0.2},
        "endpoints": [{"url": "sim", "sim_args": ["--reasoning-parser", "qwen3", "--mean-output-tokens", "40"]}],
    }


def test_run_a_dict_config_and_read_what_it_made(tmp_path: Path) -> None:
    summary = regen.run(_config(tmp_path), overrides=["generation.max_tokens=512"])
    assert summary.metrics["done"] == 12 and summary.metrics["accepted"] + summary.metrics["rejected"] == 12
    rows = list(regen.rows(tmp_path / "run"))
    assert len(rows) == summary.metrics["accepted"] and all(r["reasoning"] for r in rows)
    assert sorted(r["id"] for r in regen.rows(tmp_path / "run", columns=["id"])) == sorted(r["id"] for r in rows)
    ds = regen.dataset(tmp_path / "run")
    assert len(ds) == len(rows) and "answer" in ds.column_names
    assert regen.status(tmp_path / "run")["accepted"] == len(rows)
    assert regen.inspect(tmp_path / "run", sample=2)["rows"] == 12
    out = regen.export(tmp_path / "run", "chat", tmp_path / "chat")
    assert out["rows"] == len(rows) and (tmp_path / "chat" / "README.md").exists()
    again = regen.run(_config(tmp_path), overrides=["generation.max_tokens=512"])  # a rerun resumes: nothing to do
    assert again.metrics["already_done"] == 12 and again.metrics["done"] == 0


def test_run_inside_a_running_event_loop(tmp_path: Path) -> None:
    async def notebook_cell() -> int:
        return regen.run(_config(tmp_path, 5)).metrics["done"]

    assert asyncio.run(notebook_cell()) == 5


def test_a_misspelled_key_in_a_dict_is_named() -> None:
    with pytest.raises(regen.ConfigError, match="unknown key 'generation.max_token'; did you mean"):
        regen.load({"generation": {"max_token": 10}})


def test_audit_a_dataset() -> None:
    report = regen.audit(ROOT / "data" / "sample_conversations.jsonl")
    assert report["rows"] == 62 and report["failing_rows"] == 62
