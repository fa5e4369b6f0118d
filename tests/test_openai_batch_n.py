"""An OpenAI batch body's `n` as samples (reader) and the samples of one request as one output line (export)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from pipeline.config import GenerationConfig, InputConfig
from pipeline.dataset.export import ExportOptions
from pipeline.dataset.exporters import export
from pipeline.errors import InputError
from pipeline.inputs.batch_lines import MAX_ROW_SAMPLES
from pipeline.inputs.reader import PromptReader
from pipeline.records import BadInput, Prompt, RequestOverrides
from pipeline.schema import reject_schema, shard_schema, to_table
from tests.helpers.processes import regen


def request(custom_id: str, **body: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"question {custom_id}"}]
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"messages": messages, **body},
    }


def write_batch(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def reader(path: Path, *, overrides: bool = True, samples: int = 1, **kw: Any) -> PromptReader:
    temperatures = kw.pop("temperatures", ())
    cfg = InputConfig(path=str(path), format="openai-batch", request_overrides=overrides, batch_rows=2, **kw)
    return PromptReader(cfg, generation=GenerationConfig(samples=samples, temperatures=temperatures))


def items(r: PromptReader) -> list[Prompt | BadInput]:
    return [item for batch in r.iter_batches() for item in batch]


def scanned(r: PromptReader) -> list[str]:
    return [i for ids in r.scan_ids() for i in ids]


# ---------------------------------------------------------------- reader


def test_n_gives_that_many_samples_of_the_request(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a", n=3, seed=5), request("b"), request("c", n=1)])
    got = items(reader(path))
    assert [i.id for i in got] == ["a#0", "a#1", "a#2", "b", "c"]
    assert [getattr(i, "source_id", None) for i in got] == ["a", "a", "a", None, None]
    assert all(isinstance(i, Prompt) and i.messages == got[0].messages for i in got[:3])
    overrides = [i.overrides for i in got if isinstance(i, Prompt)]
    assert overrides == [RequestOverrides(seed=5)] * 3 + [RequestOverrides()] * 2  # n is never sent to the server
    assert scanned(reader(path)) == [i.id for i in got]


def test_n_replaces_generation_samples_and_temperatures_for_its_row(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a", n=3), request("b"), request("c", n=1)])
    r = reader(path, samples=2, temperatures=(0.2, 0.9))
    got = items(r)
    assert [i.id for i in got] == ["a#0", "a#1", "a#2", "b#0", "b#1", "c"]
    temps = {i.id: i.temperature for i in got if isinstance(i, Prompt)}
    assert temps == {"a#0": None, "a#1": None, "a#2": None, "b#0": 0.2, "b#1": 0.9, "c": None}
    assert r.check_duplicates() == 6 == len(scanned(reader(path, samples=2, temperatures=(0.2, 0.9))))


def test_without_request_overrides_n_is_listed_as_not_honoured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a", n=3), request("b", n=0), request("c")])
    r = reader(path, overrides=False)
    with caplog.at_level("WARNING", logger="pipeline.inputs.reader"):
        assert scanned(r) == ["a", "b", "c"]  # n = 0 is not checked either: it is not used
        assert scanned(r) == ["a", "b", "c"]
    (message,) = [rec.getMessage() for rec in caplog.records]
    assert "n (2 rows; " in message and "input.request_overrides = true" in message
    assert [i.id for i in items(r)] == ["a", "b", "c"]


def test_with_request_overrides_n_is_not_listed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a", n=2, response_format={"type": "json_object"})])
    with caplog.at_level("WARNING", logger="pipeline.inputs.reader"):
        scanned(reader(path))
    (message,) = [rec.getMessage() for rec in caplog.records]
    assert "response_format (1 rows)" in message and "n (" not in message


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        pytest.param(0, "got int 0", id="zero"),
        pytest.param(-2, "got int -2", id="negative"),
        pytest.param(2.0, "got float 2.0", id="float"),
        pytest.param("3", "got string '3'", id="string"),
        pytest.param(True, "got boolean True", id="boolean"),
        pytest.param(MAX_ROW_SAMPLES + 1, f"got int {MAX_ROW_SAMPLES + 1}", id="beyond-cap"),
    ],
)
def test_an_invalid_n_stops_the_run_naming_file_and_row(tmp_path: Path, n: Any, shown: str) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a"), request("b", n=n)])
    for read in (scanned, items):
        with pytest.raises(InputError) as caught:
            read(reader(path))
        message = str(caught.value)
        assert message.startswith(f"{path}:2: body.n must be an integer from 1 to {MAX_ROW_SAMPLES}")
        assert shown in message


def test_the_largest_n_allowed_is_the_cap(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a", n=MAX_ROW_SAMPLES)])
    assert scanned(reader(path))[-1] == f"a#{MAX_ROW_SAMPLES - 1}"


def test_a_bad_request_with_n_is_rejected_once_per_sample(tmp_path: Path) -> None:
    line = request("a", n=2)
    del line["body"]["messages"]
    got = items(reader(write_batch(tmp_path / "b.jsonl", [line])))
    assert [(type(i), i.id) for i in got] == [(BadInput, "a#0"), (BadInput, "a#1")]


def test_sample_ids_that_collide_with_a_custom_id_are_duplicates(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a", n=2), request("b"), request("a#1")])
    with pytest.raises(InputError, match=r"1 ids occur more than once.*'a#1' at .*b\.jsonl:1, .*b\.jsonl:3"):
        reader(path).check_duplicates()
    r = reader(path, dedupe=True)
    assert r.check_duplicates() == 3
    assert [i.id for i in items(r)] == ["a#0", "a#1", "b"]


def test_a_repeated_row_with_generation_samples_is_a_duplicate(tmp_path: Path) -> None:
    """Before, the confirming pass compared row ids with the hashes of sample ids, found nothing, and both copies
    of every sample were sent."""
    path = write_batch(tmp_path / "b.jsonl", [request("x"), request("y"), request("x")])
    with pytest.raises(InputError, match=r"2 ids occur more than once \(2 extra rows\): 'x#0'"):
        reader(path, samples=2).check_duplicates()
    r = reader(path, samples=2, dedupe=True)
    assert r.check_duplicates() == 4
    assert [i.id for i in items(r)] == ["x#0", "x#1", "y#0", "y#1"]


def test_only_ids_selects_every_sample_of_a_listed_request(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a", n=3), request("b", n=2), request("c")])
    only = frozenset({"b", "row:2"})
    cfg = InputConfig(path=str(path), format="openai-batch", request_overrides=True)
    got = [i.id for b in PromptReader(cfg, only_ids=only).iter_batches() for i in b]
    assert got == ["b#0", "b#1", "c"]
    assert scanned(PromptReader(cfg, only_ids=only)) == got


def test_regen_run_refuses_an_invalid_n_before_making_the_run_directory(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "b.jsonl", [request("a"), request("b", n=-1)])
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[input]\npath = "{path}"\nformat = "openai-batch"\nrequest_overrides = true\n'
        f'[output]\ndir = "{tmp_path / "run"}"\n[[endpoints]]\nurl = "http://127.0.0.1:9"\n'  # never reached
    )
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 2, result.stderr
    assert f"{path}:2: body.n must be an integer from 1 to {MAX_ROW_SAMPLES}" in result.stderr
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- export


def shard_row(item_id: str, source_id: str | None, i: int) -> dict[str, Any]:
    return {
        "id": item_id,
        "source_id": source_id,
        "messages": [{"role": "user", "content": f"question {source_id or item_id}"}],
        "reasoning": f"thinking {item_id}",
        "answer": f"answer {item_id}",
        "finish_reason": "stop",
        "prompt_tokens": 10,
        "completion_tokens": 100 + i,
        "reasoning_tokens": 50 + i,
        "model": "Qwen3.6-27B",
        "endpoint": "http://127.0.0.1:30000",
        "attempts": 1,
        "latency_s": 0.5,
        "seed": i,
        "created_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
    }


def write_part(folder: Path, name: str, rows: list[dict[str, Any]], *, rejects: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    schema = reject_schema([]) if rejects else shard_schema([])
    pq.write_table(to_table(rows, schema), folder / name)


def export_lines(run: Path, out: Path, **kw: Any) -> dict[str, list[dict[str, Any]]]:
    summary = export(run, "openai-batch-output", out, ExportOptions(**kw))
    lines: dict[str, list[dict[str, Any]]] = {"train": [], "rejects": []}
    for name in summary["files"]:
        split = "rejects" if Path(name).name.startswith("rejects") else "train"
        lines[split] += [orjson.loads(line) for line in (out / name).read_bytes().splitlines()]
    return lines


def test_the_samples_of_a_request_are_one_line_with_a_choice_each(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # a's samples in completion order, across two parts, with a plain row between them
    write_part(run / "shards", "part-w0-00000-aaaa0000.parquet", [shard_row("a#2", "a", 2), shard_row("p", None, 7)])
    write_part(run / "shards", "part-w0-00001-aaaa0001.parquet", [shard_row("a#0", "a", 0), shard_row("a#1", "a", 1)])
    lines = export_lines(run, tmp_path / "out")["train"]
    assert [line["custom_id"] for line in lines] == ["p", "a"]  # a is written when its last sample arrives
    body = lines[1]["response"]["body"]
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in body["choices"]] == ["answer a#0", "answer a#1", "answer a#2"]
    assert body["usage"] == {
        "prompt_tokens": 10,  # the prompt once, as OpenAI counts n > 1
        "completion_tokens": 303,
        "total_tokens": 313,
        "completion_tokens_details": {"reasoning_tokens": 153},
    }
    assert body["created"] == int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp())
    assert [c["index"] for c in lines[0]["response"]["body"]["choices"]] == [0]


def test_rejected_samples_are_one_rejects_line_naming_each(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_part(run / "shards", "part-w0-00000-aaaa0000.parquet", [shard_row("a#0", "a", 0), shard_row("a#2", "a", 2)])
    rejected = [
        {**shard_row("a#1", "a", 1), "reason": "truncated", "detail": "length"},
        {**shard_row("b#1", "b", 4), "answer": None, "finish_reason": None, "reason": "bad_input", "detail": "no"},
        {**shard_row("b#0", "b", 3), "answer": None, "finish_reason": None, "reason": "bad_input", "detail": "no"},
    ]
    write_part(run / "rejects", "part-w0-00000-bbbb0000.parquet", rejected, rejects=True)
    lines = export_lines(run, tmp_path / "out", include_rejects=True)
    (accepted,) = lines["train"]
    assert accepted["custom_id"] == "a" and accepted["error"] is None
    assert [c["index"] for c in accepted["response"]["body"]["choices"]] == [0, 2]  # the sample numbers, gap kept
    by_id = {line["custom_id"]: line for line in lines["rejects"]}
    assert by_id["a"]["error"] == {"code": "truncated", "message": "#1 truncated: length"}
    assert [c["index"] for c in by_id["a"]["response"]["body"]["choices"]] == [1]
    assert by_id["b"]["error"] == {"code": "bad_input", "message": "#0 bad_input: no; #1 bad_input: no"}
    assert by_id["b"]["response"] is None  # no sample received a completion


def test_batch_export_of_samples_is_byte_identical_twice(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rows = [shard_row(f"r{i // 3}#{i % 3}", f"r{i // 3}", i) for i in range(30)]
    write_part(run / "shards", "part-w0-00000-aaaa0000.parquet", rows[::2])
    write_part(run / "shards", "part-w0-00001-aaaa0001.parquet", rows[1::2])
    first = export(run, "openai-batch-output", tmp_path / "one", ExportOptions(rows_per_file=4))
    again = export(run, "openai-batch-output", tmp_path / "two", ExportOptions(rows_per_file=4))
    assert first["rows"] == 10 and first["files"] == again["files"]
    for name in first["files"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
