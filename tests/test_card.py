"""The dataset card: front matter that loads the export, counts, reject rates, lengths, and a reproducible config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import orjson
import pyarrow.parquet as pq
import pytest
import yaml
from huggingface_hub import DatasetCard

from pipeline.config import Config, config_from_dict, load_config
from pipeline.dataset.card import CardOptions, config_toml, run_stats, write_card
from pipeline.dataset.features import size_category
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
    check = {"name": "expect", "key": "tp_size", "expected": 2, "actual": 2, "ok": True, "hint": "see http://10.0.0.1"}
    info = {"dp_size": 2, "router_workers": ["http://10.0.0.2:30000"]}
    manifest["preflight"] = {"endpoints": [{"url": "http://10.0.0.1:30000", "info": info, "checks": [check]}]}
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
    assert '"dp_size": 2' in text and '"key": "tp_size"' in text  # preflight server settings
    assert '"router_workers": 1' in text  # counted, not named
    assert "| speculative_algorithm | EAGLE |" in text
    assert "regen run regen-config.toml --endpoint URL --output NEW_RUN_DIR" in text and "feedbeef" in text
    for leak in ("10.0.0.1", "10.0.0.2", "http://10"):
        assert leak not in text and leak not in (tmp_path / "out" / "regen-config.toml").read_text()


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


def test_card_writes_the_config_beside_it_without_endpoints(tmp_path: Path) -> None:
    config = _config()
    config["launch"]["host"] = "gpu-node-3"
    config["output"]["metrics_host"] = "10.0.0.9"
    config["endpoints"][1]["sim_args"] = ["--x", "--host", "gpu-node-3"]
    _run(tmp_path / "run", {"config": config})
    write_card(tmp_path / "run", tmp_path / "out", SUMMARY)
    text = (tmp_path / "out" / "regen-config.toml").read_text()
    assert "10.0.0" not in text and "gpu-node-3" not in text
    written = load_config(tmp_path / "out" / "regen-config.toml").to_dict()
    want = _config()
    want["endpoints"][0]["url"] = "http://endpoint-1.invalid"  # stops at preflight: give yours with --endpoint
    assert written == want


def test_license_language_and_sizes_in_the_front_matter(tmp_path: Path) -> None:
    manifest = {"config": {**_config(), "export": {"license": "mit", "language": "fr"}}}
    _run(tmp_path / "run", manifest)
    meta = _front_matter(write_card(tmp_path / "run", tmp_path / "out", SUMMARY).read_text())
    assert (meta["license"], meta["language"]) == ("mit", ["fr"])  # the config's [export] table
    assert meta["task_categories"] == ["text-generation"] and meta["size_categories"] == ["n<1K"]
    options = CardOptions("apache-2.0", ("en", "de"))
    text = write_card(tmp_path / "run", tmp_path / "out", SUMMARY, options=options).read_text()
    assert (_front_matter(text)["license"], _front_matter(text)["language"]) == ("apache-2.0", ["en", "de"])
    _run(tmp_path / "bare", None)
    meta = _front_matter(write_card(tmp_path / "bare", tmp_path / "out2", SUMMARY).read_text())
    assert meta["license"] == "unknown" and "language" not in meta


@pytest.mark.parametrize(
    ("rows", "label"), [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (250_000, "100K<n<1M")], ids=str
)
def test_size_categories(rows: int, label: str) -> None:
    assert size_category(rows) == label


def test_features_are_what_datasets_reads_from_the_files(tmp_path: Path) -> None:
    from pipeline.dataset.export import ExportOptions
    from pipeline.dataset.exporters import export

    _run(tmp_path / "run", {"config": _config()})
    out = tmp_path / "out"
    export(tmp_path / "run", "chat", out, ExportOptions(include_rejects=True, card=CardOptions("mit", ("en",))))
    card = DatasetCard.load(out / "README.md")  # huggingface_hub's own parser of the card
    assert card.data.license == "mit" and card.data.language == ["en"]
    infos = {info["config_name"]: info["features"] for info in card.data.to_dict()["dataset_info"]}
    for config, split in (("default", "train"), ("rejects", "rejects")):
        schema = pq.read_schema(out / "data" / f"{split}-00000.parquet")
        assert datasets.Features._from_yaml_list(infos[config]) == datasets.Features.from_arrow_schema(schema)
    cache = str(tmp_path / "hf-cache")
    assert len(datasets.load_dataset(str(out), split="train", cache_dir=cache)) == 101
    assert len(datasets.load_dataset(str(out), "rejects", split="train", cache_dir=cache)) == 9
