"""The export of training formats (the registry's `export`, export.py): each format loads with `datasets` and matches
the run row for row; rejects only when asked."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import datasets
import orjson
import pyarrow.parquet as pq
import pytest

from pipeline.config import Config
from pipeline.dataset.export import ExportOptions, assistant_content
from pipeline.dataset.exporters import export
from pipeline.errors import ConfigError
from pipeline.schema import reject_schema, shard_schema, to_table

KEEP = ["source"]


def shard_row(i: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"question {i}"}]
    if i % 3 == 0:
        messages.insert(0, {"role": "system", "content": "be brief"})
    return {
        "id": f"p{i:04d}",
        "messages": messages,
        "reasoning": f"thinking about {i}",
        "answer": f"answer {i}",
        "finish_reason": "stop",
        "prompt_tokens": 10 + i,
        "completion_tokens": 100 + i,
        "reasoning_tokens": None if i % 5 == 0 else 60 + i,
        "model": "Qwen3.6-27B",
        "endpoint": "http://127.0.0.1:30000",
        "attempts": 1,
        "latency_s": 0.5,
        "seed": i,
        "created_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        "source": f"src-{i % 2}",
    }


def make_run(run_dir: Path, shard_sizes: list[int], rejects: list[tuple[int, str]] = ()) -> list[dict[str, Any]]:
    """A RUN_DIR with one committed part per size, optional rejects, a run.json and files a reader must skip."""
    (run_dir / "shards").mkdir(parents=True)
    (run_dir / "rejects").mkdir()
    rows, start = [], 0
    for n, size in enumerate(shard_sizes):
        part = [shard_row(i) for i in range(start, start + size)]
        pq.write_table(to_table(part, shard_schema(KEEP)), run_dir / "shards" / f"part-w0-{n:05d}-abcd{n:04x}.parquet")
        rows += part
        start += size
    if rejects:
        bad = [{**shard_row(i), "reason": reason, "detail": "x"} for i, reason in rejects]
        pq.write_table(to_table(bad, reject_schema(KEEP)), run_dir / "rejects" / "part-w0-00000-00000000.parquet")
    # files being written: never read
    pq.write_table(to_table([shard_row(9999)], shard_schema(KEEP)), run_dir / "shards" / ".worker-0-7.parquet.tmp")
    pq.write_table(to_table([shard_row(9998)], shard_schema(KEEP)), run_dir / "shards" / "x.parquet.tmp")
    config = Config().to_dict()
    config["generation"]["model"] = "Qwen3.6-27B"
    config["input"]["keep_fields"] = KEEP
    config["expect"] = {"speculative_algorithm": "EAGLE"}
    manifest = {"config": config, "config_hash": "abc123", "input": {"files": ["data/p.jsonl"]}, "counts": {}}
    manifest["preflight"] = {"http://127.0.0.1:30000": {"speculative_algorithm": "EAGLE", "tp_size": 2}}
    (run_dir / "run.json").write_bytes(orjson.dumps(manifest))
    return rows


def _load(out: Path, summary: dict[str, Any], split: str = "train") -> datasets.Dataset:
    builder = "json" if summary["file_format"] == "jsonl" else "parquet"
    files = str(out / summary["data_files"][split])
    return datasets.load_dataset(builder, data_files=files, split="train", cache_dir=str(out.parent / "hf-cache"))


@pytest.mark.parametrize("file_format", ["parquet", "jsonl"])
def test_chat_round_trips_through_datasets(tmp_path: Path, file_format: str) -> None:
    rows = make_run(tmp_path / "run", [7, 5, 9])
    out = tmp_path / "out"
    summary = export(
        tmp_path / "run", "chat", out, ExportOptions(file_format=file_format, rows_per_file=8, reasoning="inline")
    )
    assert summary["rows"] == 21 and summary["format"] == "chat"
    assert [Path(f).name for f in summary["files"]] == [f"train-0000{i}.{file_format}" for i in range(3)]
    loaded = _load(out, summary)
    assert len(loaded) == len(rows)
    for got, want in zip(loaded, rows, strict=True):
        assert got["id"] == want["id"]
        assert got["messages"][:-1] == want["messages"]
        content = f"<think>\n{want['reasoning']}\n</think>\n\n{want['answer']}"
        assert got["messages"][-1] == {"role": "assistant", "content": content}
        for key in ("model", "finish_reason", "prompt_tokens", "completion_tokens", "reasoning_tokens", "source"):
            assert got[key] == want[key]


def test_export_dir_loads_from_its_card(tmp_path: Path) -> None:
    make_run(tmp_path / "run", [4, 4], rejects=[(100, "truncated")])
    out = tmp_path / "out"
    export(tmp_path / "run", "chat", out, ExportOptions(include_rejects=True))
    cache = str(tmp_path / "hf-cache")
    assert len(datasets.load_dataset(str(out), split="train", cache_dir=cache)) == 8
    rejects = datasets.load_dataset(str(out), "rejects", split="train", cache_dir=cache)
    assert rejects["reason"] == ["truncated"]


def test_think_tags_are_configurable(tmp_path: Path) -> None:
    make_run(tmp_path / "run", [3])
    out = tmp_path / "out"
    tags = {"think_open": "<reasoning>", "think_close": "</reasoning>"}
    summary = export(tmp_path / "run", "chat", out, ExportOptions(reasoning="inline", **tags))
    last = _load(out, summary)[0]["messages"][-1]["content"]
    assert last == "<reasoning>\nthinking about 0\n</reasoning>\n\nanswer 0"


def test_missing_reasoning_gives_empty_think_block() -> None:
    assert assistant_content(None, "hi", "<think>", "</think>") == "<think>\n\n</think>\n\nhi"


def test_sharegpt(tmp_path: Path) -> None:
    rows = make_run(tmp_path / "run", [6])
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "sharegpt", out)
    loaded = _load(out, summary)
    assert loaded["id"] == [r["id"] for r in rows]
    first = loaded[0]["conversations"]  # row 0 has a system prompt
    assert [t["from"] for t in first] == ["system", "human", "gpt"]
    assert first[1]["value"] == "question 0"
    assert first[2]["value"] == "<think>\nthinking about 0\n</think>\n\nanswer 0"
    assert [t["from"] for t in loaded[1]["conversations"]] == ["human", "gpt"]


def test_openai_batch_output(tmp_path: Path) -> None:
    rows = make_run(tmp_path / "run", [4, 3])
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "openai-batch-output", out)  # parquet asked, jsonl written
    assert summary["file_format"] == "jsonl"
    lines = [orjson.loads(line) for f in summary["files"] for line in (out / f).read_bytes().splitlines()]
    assert [line["custom_id"] for line in lines] == [r["id"] for r in rows]
    line, want = lines[1], rows[1]
    assert line["error"] is None and line["response"]["status_code"] == 200
    body = line["response"]["body"]
    assert body["object"] == "chat.completion" and body["model"] == "Qwen3.6-27B"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "answer 1", "reasoning_content": "thinking about 1"}
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["total_tokens"] == want["prompt_tokens"] + want["completion_tokens"]
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": want["reasoning_tokens"]}
    assert len(_load(out, summary)) == len(rows)
    again = export(tmp_path / "run", "openai-batch-output", tmp_path / "again")
    assert (tmp_path / "again" / again["files"][0]).read_bytes() == (out / summary["files"][0]).read_bytes()


def test_rejects_are_exported_only_when_asked(tmp_path: Path) -> None:
    make_run(tmp_path / "run", [5], rejects=[(50, "truncated"), (51, "empty_answer")])
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "chat", out)
    assert summary["rejected_rows"] == 0 and set(summary["data_files"]) == {"train"}
    assert not any("p0050" in str(pq.read_table(out / f).column("id")) for f in summary["files"])
    summary = export(tmp_path / "run", "chat", out, ExportOptions(include_rejects=True))
    rejected = _load(out, summary, "rejects")
    assert rejected["id"] == ["p0050", "p0051"] and rejected["reason"] == ["truncated", "empty_answer"]


def test_rejects_in_batch_output_carry_the_reason(tmp_path: Path) -> None:
    make_run(tmp_path / "run", [2], rejects=[(50, "truncated")])
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "openai-batch-output", out, ExportOptions(include_rejects=True))
    line = orjson.loads((out / summary["data_files"]["rejects"].replace("*", "00000")).read_bytes())
    assert line["custom_id"] == "p0050" and line["error"] == {"code": "truncated", "message": "x"}


def test_reexport_removes_stale_files_and_leaves_no_temp_files(tmp_path: Path) -> None:
    make_run(tmp_path / "run", [10])
    out = tmp_path / "out"
    export(tmp_path / "run", "chat", out, ExportOptions(rows_per_file=2))
    summary = export(tmp_path / "run", "chat", out, ExportOptions(file_format="jsonl", rows_per_file=5))
    assert sorted(p.name for p in (out / "data").iterdir()) == ["train-00000.jsonl", "train-00001.jsonl"]
    assert summary["files"] == ["data/train-00000.jsonl", "data/train-00001.jsonl"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"format": "alpaca"}, "unknown export format"),
        ({"format": "chat", "file_format": "csv"}, "unknown file format"),
        ({"format": "chat", "rows_per_file": 0}, "rows_per_file"),
    ],
    ids=["format", "file-format", "rows-per-file"],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    make_run(tmp_path / "run", [1])
    with pytest.raises(ConfigError, match=match):
        options = {name: value for name, value in kwargs.items() if name != "format"}
        export(tmp_path / "run", kwargs["format"], tmp_path / "out", ExportOptions(**options))


def test_every_format_is_one_exporter_of_the_registry_with_its_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's --format choices and regen.export both read the registry: one exporter per format, each with its
    options record; a record of another format is refused, a keyword of another format is left to it."""
    import regen
    from pipeline.cli import main
    from pipeline.dataset.exporters import NAMES, exporter_for
    from pipeline.dataset.repair import RepairOptions

    assert NAMES == (
        "chat",
        "sharegpt",
        "specforge",
        "prompt-completion",
        "tokenized",
        "openai-batch-output",
        "repaired",
    )
    assert {name: exporter_for(name).options for name in NAMES} == {
        **{name: ExportOptions for name in NAMES[:-1]},
        "repaired": RepairOptions,
    }
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    assert f"--format {{{','.join(NAMES)}}}" in capsys.readouterr().out
    make_run(tmp_path / "run", [3])
    with pytest.raises(TypeError, match="takes RepairOptions, not ExportOptions"):
        export(tmp_path / "run", "repaired", tmp_path / "out", ExportOptions())
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        regen.export(tmp_path / "run", "chat", tmp_path / "out", bogus=1)
    summary = regen.export(tmp_path / "run", "chat", tmp_path / "out", on_reject="drop")  # repaired's: not chat's
    assert summary["rows"] == 3 and summary["format"] == "chat"
