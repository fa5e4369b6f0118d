"""The dataset card: front matter that loads the export, counts, reject rates, lengths, and a reproducible config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.config import Config, config_from_dict, load_config
from pipeline.dataset.card import config_toml, run_stats, write_card
from pipeline.schema import reject_schema, shard_schema, to_table


def _row(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"p{i}",
        "messages": [{"role": "user", "content": "q"}],
        "answer": "a",
        "reasoning": "r",
        "finish_reason": "stop",
        "prompt_tokens": 5,
        "completion_tokens": i,
        "reasoning_tokens": None if i == 0 else i // 2,
        **extra,
    }


def _run(run_dir: Path, manifest: dict[str, Any] | None) -> None:
    (run_dir / "shards").mkdir(parents=True)
    (run_dir / "rejects").mkdir()
    pq.write_table(to_table([_row(i) for i in range(101)], shard_schema()), run_dir / "shards" / "part-a.parquet")
    reasons = ["truncated"] * 6 + ["empty_answer"] * 2 + ["exhausted_retries"]
    rejects = [_row(1000 + i, reason=r, detail="") for i, r in enumerate(reasons)]
    pq.write_table(to_table(rejects, reject_schema()), run_dir / "rejects" / "part-a.parquet")
    if manifest is not None:
        (run_dir / "run.json").write_bytes(orjson.dumps(manifest))


def _config() -> dict[str, Any]:
    return config_from_dict(
        {
            "generation": {"model": "Qwen3.6-27B", "temperature": 0.7, "max_tokens": 4096},
            "endpoints": [{"url": "http://10.0.0.1:30000", "concurrency": 8}, {"url": "sim", "sim_args": ["--x"]}],
            "expect": {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3},
            "launch": {"env": {"SGLANG_ENABLE_SPEC_V2": "1"}, "args": {"model-path": "Qwen/Q", "tp": 2}},
            "input": {"keep_fields": ["source", "weird key"], "system_prompt": 'say "hi"\n\tok ✓ \x7f'},
        }
    ).to_dict()


SUMMARY = {"format": "chat", "file_format": "parquet", "rows": 101, "data_files": {"train": "data/train-*.parquet"}}


def _front_matter(text: str) -> dict[str, Any]:
    assert text.startswith("---\n")
    head, _, _ = text[4:].partition("\n---\n")
    return dict(yaml.safe_load(head))


def test_card_has_front_matter_counts_and_reject_rates(tmp_path: Path) -> None:
    manifest = {"config": _config(), "config_hash": "feedbeef", "input": {"files": ["in.jsonl"]}}
    manifest["preflight"] = {"endpoints": [{"url": "http://10.0.0.1:30000", "server_args": {"tp_size": 2}}]}
    _run(tmp_path / "run", manifest)
    card = write_card(tmp_path / "run", tmp_path / "out", SUMMARY)
    text = card.read_text()
    meta = _front_matter(text)
    assert meta["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": SUMMARY["data_files"]["train"]}]}
    ]
    assert "| accepted | 101 | 91.82% |" in text
    assert "| rejected: `truncated` | 6 | 5.45% |" in text
    assert "| rejected: `exhausted_retries` | 1 | 0.91% |" in text
    assert "110 prompts" in text
    assert "Qwen3.6-27B" in text and "| temperature | 0.7 |" in text
    assert '"tp_size": 2' in text  # preflight server settings
    assert "| speculative_algorithm | EAGLE |" in text
    assert "regen run regen-config.toml --output NEW_RUN_DIR" in text and "feedbeef" in text
    assert "10.0.0.1" not in text.split('"url"')[0]  # endpoint urls only appear inside the preflight record


def test_length_percentiles_skip_unknown_reasoning_tokens(tmp_path: Path) -> None:
    _run(tmp_path / "run", None)
    stats = run_stats(tmp_path / "run")
    assert stats["accepted"] == 101 and stats["rejected_by_reason"]["empty_answer"] == 2
    assert stats["lengths"]["completion_tokens"]["p50"] == 50 and stats["lengths"]["completion_tokens"]["max"] == 100
    assert stats["lengths"]["reasoning_tokens"]["p50"] == 25.0  # row 0 has no reasoning token count
    assert stats["finish_reasons"] == {"stop": 101}


def test_card_without_manifest_still_writes(tmp_path: Path) -> None:
    _run(tmp_path / "run", None)
    text = write_card(tmp_path / "run", tmp_path / "out", SUMMARY).read_text()
    assert "cannot be reproduced" in text and not (tmp_path / "out" / "regen-config.toml").exists()


@pytest.mark.parametrize("config", [Config().to_dict(), _config()], ids=["defaults", "everything"])
def test_written_config_loads_back_to_the_same_config(tmp_path: Path, config: dict[str, Any]) -> None:
    path = tmp_path / "regen-config.toml"
    path.write_text(config_toml(config), encoding="utf-8")
    assert load_config(path).to_dict() == config


def test_card_writes_the_config_beside_it(tmp_path: Path) -> None:
    _run(tmp_path / "run", {"config": _config()})
    write_card(tmp_path / "run", tmp_path / "out", SUMMARY)
    assert load_config(tmp_path / "out" / "regen-config.toml").to_dict() == _config()
