"""The prompt reader: every input format, ids, bad rows, duplicates, and streaming."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import InputConfig
from pipeline.errors import ConfigError, InputError
from pipeline.inputs.reader import PromptReader, content_id
from pipeline.records import BadInput, Prompt, RequestOverrides

ROOT = Path(__file__).resolve().parent.parent
HELLO = ({"role": "user", "content": "hello"},)


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    lines = [row if isinstance(row, bytes) else orjson.dumps(row) for row in rows]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def read_all(path: Path | str, **kw: Any) -> list[Prompt | BadInput]:
    reader = PromptReader(InputConfig(path=str(path), **kw))
    return [item for batch in reader.iter_batches() for item in batch]


def only(items: list[Prompt | BadInput]) -> Prompt | BadInput:
    assert len(items) == 1, items
    return items[0]


# ---------------------------------------------------------------- formats


def test_jsonl_mixes_messages_and_prompt_rows(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    chat.append({"role": "user", "content": "how are you?"})
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "messages": chat}, {"id": 7, "prompt": "hello"}])
    a, b = read_all(path)
    assert a == Prompt("a", tuple(chat), f"{path}:1", {}, turns=(1, 3))  # both assistant turns are generated
    assert b == Prompt("7", HELLO, f"{path}:2", {})


def test_jsonl_skips_blank_lines_and_counts_lines_from_one(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "prompt": "x"}\n\n   \n{"id": "b", "prompt": "y"}')
    assert [(p.id, p.source) for p in read_all(path)] == [("a", f"{path}:1"), ("b", f"{path}:4")]


def test_jsonl_gz(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": "a", "prompt": "hello"}\n'))
    assert read_all(path) == [Prompt("a", HELLO, f"{path}:1", {})]


def test_parquet_rows_are_numbered_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    table = pa.table(
        {
            "id": [10, 11],
            "messages": [[{"role": "user", "content": "hello"}], None],
            "prompt": [None, "second"],
            "other": ["x", "y"],
        }
    )
    pq.write_table(table, path)
    a, b = read_all(path)
    assert a == Prompt("10", HELLO, f"{path}:0", {})
    assert b == Prompt("11", ({"role": "user", "content": "second"},), f"{path}:1", {})


def test_folder_reads_supported_files_in_sorted_order(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b.jsonl", [{"id": "b", "prompt": "x"}])
    pq.write_table(pa.table({"id": ["a"], "prompt": ["x"]}), tmp_path / "a.parquet")
    write_jsonl(tmp_path / ".hidden.jsonl", [{"id": "hidden", "prompt": "x"}])
    (tmp_path / "README.md").write_text("not data")
    reader = PromptReader(InputConfig(path=str(tmp_path)))
    assert reader.files() == [tmp_path / "a.parquet", tmp_path / "b.jsonl"]
    assert [p.id for p in read_all(tmp_path)] == ["a", "b"]


def test_path_override_replaces_the_configured_path(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "other.ndjson", [{"id": "o", "prompt": "x"}])
    reader = PromptReader(InputConfig(path="does/not/exist.jsonl"), path_override=str(path))
    assert reader.files() == [path]
    assert [p.id for b in reader.iter_batches() for p in b] == ["o"]


def test_glob_matches_files_across_folders(tmp_path: Path) -> None:
    for part in ("p2", "p1"):
        (tmp_path / part).mkdir()
        write_jsonl(tmp_path / part / "data.jsonl", [{"id": part, "prompt": "x"}])
    write_jsonl(tmp_path / "p1" / "skip.txt", [{"id": "no", "prompt": "x"}])
    pattern = str(tmp_path / "*" / "*")
    assert PromptReader(InputConfig(path=pattern)).files() == [tmp_path / "p1/data.jsonl", tmp_path / "p2/data.jsonl"]
    assert [p.id for p in read_all(pattern)] == ["p1", "p2"]


def test_datasets_save_to_disk_folder(tmp_path: Path) -> None:
    import datasets

    rows: dict[str, list[Any]] = {"id": [f"r{i}" for i in range(30)], "prompt": [f"question {i}" for i in range(30)]}
    rows["messages"] = [None] * 29 + [[{"role": "user", "content": "chat"}]]
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ds"), num_shards=3)
    reader = PromptReader(InputConfig(path=str(tmp_path / "ds"), batch_rows=7))
    assert [f.suffix for f in reader.files()] == [".arrow"] * 3
    items = [item for batch in reader.iter_batches() for item in batch]
    assert [p.id for p in items] == rows["id"]
    assert items[0].source == f"{reader.files()[0]}:0"
    assert items[29] == Prompt("r29", ({"role": "user", "content": "chat"},), f"{reader.files()[2]}:9", {})
    assert reader.check_duplicates() == 30

    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(InputError, match=r"one split.*train"):
        PromptReader(InputConfig(path=str(tmp_path / "dd"))).files()


def test_arrow_ipc_file_format(tmp_path: Path) -> None:
    table = pa.table({"id": ["a", "b"], "prompt": ["hello", "there"]})
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    assert [p.id for p in read_all(tmp_path / "t.arrow")] == ["a", "b"]


# ---------------------------------------------------------------- OpenAI batch files


def batch_line(custom_id: str | None = "request-1", **changes: Any) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_completion_tokens": 100}
    line: dict[str, Any] = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    line.update(changes)
    return line


def test_openai_batch_reads_requests_and_exposes_sampling_overrides(tmp_path: Path) -> None:
    line = batch_line()
    line["body"].update(temperature=0.2, top_p=0.5, top_k=5, seed=3, max_tokens=50, n=2, model="other")
    path = write_jsonl(tmp_path / "batch.jsonl", [line])
    prompt = only(read_all(path, format="openai-batch", system_prompt="Be brief."))
    assert prompt == Prompt(
        "request-1",
        ({"role": "system", "content": "Be brief."}, *HELLO),
        f"{path}:1",
        overrides=RequestOverrides(
            temperature=0.2, top_p=0.5, top_k=5, seed=3, max_tokens=50, max_completion_tokens=100
        ),
    )


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        pytest.param(batch_line(method="GET"), "method must be 'POST'", id="method"),
        pytest.param(batch_line(url="/v1/embeddings"), "url must be '/v1/chat/completions'", id="url"),
        pytest.param(batch_line(body="x"), "body must be an object", id="body"),
        pytest.param(batch_line(body={"model": "m"}), "body has no messages", id="no-messages"),
        pytest.param(batch_line(body={"messages": [], "seed": 1}), "body.messages is empty", id="empty"),
        pytest.param(batch_line(custom_id=None), "missing custom_id", id="no-custom-id"),
    ],
)
def test_openai_batch_bad_requests(tmp_path: Path, line: dict[str, Any], detail: str) -> None:
    path = write_jsonl(tmp_path / "batch.jsonl", [line])
    bad = only(read_all(path, format="openai-batch"))
    assert isinstance(bad, BadInput)
    assert detail in bad.detail
    assert bad.source == f"{path}:1"


def test_openai_batch_bad_sampling_type(tmp_path: Path) -> None:
    line = batch_line()
    line["body"]["max_completion_tokens"] = "lots"
    bad = only(read_all(write_jsonl(tmp_path / "b.jsonl", [line]), format="openai-batch"))
    assert isinstance(bad, BadInput)
    assert (bad.id, bad.detail) == ("request-1", "body.max_completion_tokens must be an integer, got string 'lots'")


def test_sample_batch_file_reads_cleanly() -> None:
    reader = PromptReader(InputConfig(path=str(ROOT / "data/sample_batch.jsonl"), format="openai-batch"))
    items = [item for batch in reader.iter_batches() for item in batch]
    assert reader.check_duplicates() == len(items) == 20
    assert all(isinstance(p, Prompt) and p.overrides and p.overrides.max_completion_tokens for p in items)


# ---------------------------------------------------------------- system prompt, ids, keep_fields


def test_system_prompt_is_prepended_unless_one_is_present(tmp_path: Path) -> None:
    own = [{"role": "system", "content": "mine"}, {"role": "user", "content": "q"}]
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt": "q"}, {"id": "b", "messages": own}])
    a, b = read_all(path, system_prompt="default")
    assert isinstance(a, Prompt) and isinstance(b, Prompt)
    assert a.messages == ({"role": "system", "content": "default"}, {"role": "user", "content": "q"})
    assert b.messages == tuple(own)


def test_missing_ids_become_a_stable_content_hash(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "hello"}, {"messages": list(HELLO)}])
    a, b = read_all(path)
    expected = hashlib.sha256(b'[{"content":"hello","role":"user"}]').hexdigest()[:16]
    assert a.id == b.id == content_id(HELLO) == expected == "d98167dd28f22e33"
    with_system = only(read_all(write_jsonl(tmp_path / "s.jsonl", [{"prompt": "hello"}]), system_prompt="S"))
    assert with_system.id != expected  # the hash is of the final messages


def test_a_null_id_in_json_is_bad_input_naming_the_row(tmp_path: Path) -> None:
    """`"id": null` was meant to be an id: it is rejected, not hashed (an absent field still hashes)."""
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt": "x"}, {"id": None, "prompt": "hello"}])
    reader = PromptReader(InputConfig(path=str(path)))
    a, null = [item for batch in reader.iter_batches() for item in batch]
    assert isinstance(a, Prompt) and isinstance(null, BadInput)
    assert null.id == "bad-input:in.jsonl:2" and null.source == f"{path}:2"
    assert null.detail.startswith("id is null")
    assert [i for ids in reader.scan_ids() for i in ids] == ["a", "bad-input:in.jsonl:2"]


def test_an_empty_input_file_is_a_warning_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"id": "a", "prompt": "x"}])
    (tmp_path / "b.jsonl").write_bytes(b"\n  \n")
    pq.write_table(
        pa.table({"id": pa.array([], pa.string()), "prompt": pa.array([], pa.string())}), tmp_path / "c.parquet"
    )
    reader = PromptReader(InputConfig(path=str(tmp_path)))
    with caplog.at_level("WARNING", logger="pipeline.inputs.reader"):
        assert reader.check_duplicates() == 1
        assert [p.id for batch in reader.iter_batches() for p in batch] == ["a"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'b.jsonl'}: input file has no rows",
        f"{tmp_path / 'c.parquet'}: input file has no rows",
    ]


def test_content_hash_is_the_same_in_another_process(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "bonjour 世界"}])
    code = (
        "import sys; from pipeline.config import InputConfig; from pipeline.inputs.reader import PromptReader;"
        "print(next(PromptReader(InputConfig(path=sys.argv[1])).iter_batches())[0].id)"
    )
    env = {"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == only(read_all(path)).id


def test_keep_fields_are_stringified_and_missing_ones_are_none(tmp_path: Path) -> None:
    rows = [{"id": "a", "prompt": "x", "cat": "math", "n": 3, "tags": ["t"]}, {"id": "b", "prompt": "y"}]
    a, b = read_all(write_jsonl(tmp_path / "in.jsonl", rows), keep_fields=("cat", "n", "tags"))
    assert a.extra == {"cat": "math", "n": "3", "tags": '["t"]'}
    assert b.extra == {"cat": None, "n": None, "tags": None}
    pq.write_table(pa.table({"id": ["c"], "prompt": ["z"], "cat": ["code"]}), tmp_path / "in.parquet")
    assert only(read_all(tmp_path / "in.parquet", keep_fields=("cat", "n"))).extra == {"cat": "code", "n": None}


def test_custom_field_names(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"uid": "u1", "question": "hello"}])
    assert only(read_all(path, id_field="uid", prompt_field="question")) == Prompt("u1", HELLO, f"{path}:1", {})


# ---------------------------------------------------------------- bad rows


@pytest.mark.parametrize(
    ("line", "item_id", "detail"),
    [
        pytest.param({"id": "e", "prompt": ""}, "e", "prompt is empty", id="empty-prompt"),
        pytest.param({"id": "w", "prompt": "  \n"}, "w", "prompt is empty", id="blank-prompt"),
        pytest.param({"id": "n", "prompt": 42}, "n", "prompt must be a string, got int 42", id="number-prompt"),
        pytest.param({"id": "m"}, "m", "no 'messages' or 'conversations' or 'prompt' field", id="no-prompt"),
        pytest.param({"id": "l", "messages": []}, "l", "messages is empty", id="empty-messages"),
        pytest.param({"id": "s", "messages": "hi"}, "s", "messages must be a list", id="messages-string"),
        pytest.param({"id": "c", "messages": [{"role": "user"}]}, "c", "messages[0] has no content", id="no-content"),
        pytest.param({"id": "r", "messages": [{"content": "x"}]}, "r", "messages[0] has no role", id="no-role"),
        pytest.param(
            {"id": "t", "messages": [{"role": "user", "content": ["x"]}]},
            "t",
            "messages[0].content[0] must be a content part {type, text}, got string 'x'",
            id="content-list",
        ),
        pytest.param(
            {"id": "o", "messages": [{"role": "robot", "content": "x"}]},
            "o",
            "messages[0].role must be one of",
            id="unknown-role",
        ),
        pytest.param({"id": "x", "messages": ["hi"]}, "x", "messages[0] must be an object", id="message-string"),
        pytest.param({"id": 1.5, "prompt": "x"}, "bad-input:in.jsonl:1", "id must be a string or an integer", id="id"),
        pytest.param({"id": True, "prompt": "x"}, "bad-input:in.jsonl:1", "got boolean True", id="bool-id"),
        pytest.param({"id": "", "prompt": "x"}, "bad-input:in.jsonl:1", "id is empty", id="empty-id"),
        pytest.param({"prompt": ""}, "bad-input:in.jsonl:1", "prompt is empty", id="no-id-and-bad"),
        pytest.param([1, 2], "bad-input:in.jsonl:1", "row is a JSON array, not an object", id="array-row"),
        pytest.param(b'{"id": "j", "prompt": "unterminated', "bad-input:in.jsonl:1", "invalid JSON", id="json"),
        pytest.param(b'{"id": "u", "prompt": "caf\xe9"}', "bad-input:in.jsonl:1", "not valid UTF-8", id="utf8"),
    ],
)
def test_bad_rows_become_bad_input_naming_file_and_row(tmp_path: Path, line: Any, item_id: str, detail: str) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [line, {"id": "fine", "prompt": "ok"}])
    reader = PromptReader(InputConfig(path=str(path), keep_fields=("id",)))
    bad, fine = [item for batch in reader.iter_batches() for item in batch]
    assert isinstance(bad, BadInput)
    assert (bad.id, bad.source) == (item_id, f"{path}:1")
    assert detail in bad.detail
    assert fine == Prompt("fine", ({"role": "user", "content": "ok"},), f"{path}:2", {"id": "fine"})
    assert [i for ids in reader.scan_ids() for i in ids] == [item_id, "fine"]


def test_bad_parquet_row_names_its_index(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt": ["ok", "", None]}), path)
    items = read_all(path)
    assert [(type(i).__name__, i.id, i.source) for i in items[1:]] == [
        ("BadInput", "bad-input:in.parquet:1", f"{path}:1"),
        ("BadInput", "bad-input:in.parquet:2", f"{path}:2"),
    ]


def test_bad_input_ids_stay_unique_when_file_names_clash(tmp_path: Path) -> None:
    for part in ("a", "b"):
        (tmp_path / part).mkdir()
        write_jsonl(tmp_path / part / "data.jsonl", [{"prompt": ""}])
    reader = PromptReader(InputConfig(path=str(tmp_path / "*" / "data.jsonl")))
    ids = [item.id for batch in reader.iter_batches() for item in batch]
    assert ids == ["bad-input:a/data.jsonl:1", "bad-input:b/data.jsonl:1"]
    assert reader.check_duplicates() == 2


# ---------------------------------------------------------------- duplicates


def test_duplicate_ids_are_an_error_naming_examples(tmp_path: Path) -> None:
    rows = [{"id": f"id{i % 7}", "prompt": f"p{i}"} for i in range(20)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    with pytest.raises(InputError) as info:
        PromptReader(InputConfig(path=str(path))).check_duplicates()
    message = str(info.value)
    assert "7 ids occur more than once (13 extra rows)" in message
    assert f"'id0' at {path}:1, {path}:8, {path}:15" in message
    assert "'id4'" in message and "'id5'" not in message  # at most five examples
    assert "input.dedupe" in message


def test_duplicates_across_formats_and_identical_unnamed_prompts(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"id": "same", "prompt": "x"}, {"prompt": "twin"}, {"prompt": "twin"}])
    pq.write_table(pa.table({"id": ["same"], "prompt": ["y"]}), tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"2 ids occur more than once.*'same' at .*a.jsonl:1, .*b.parquet:0"):
        PromptReader(InputConfig(path=str(tmp_path))).check_duplicates()


def test_dedupe_keeps_the_first_row_of_each_id(tmp_path: Path) -> None:
    rows = [{"id": "a", "prompt": "first"}, {"id": "b", "prompt": "x"}, {"id": "a", "prompt": "second"}]
    rows += [{"id": "c", "prompt": "y"}, {"id": "a", "prompt": "third"}]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    reader = PromptReader(InputConfig(path=str(path), dedupe=True, batch_rows=2))
    assert reader.check_duplicates() == 3
    batches = list(reader.iter_batches())
    assert [[p.id for p in b] for b in batches] == [["a", "b"], ["c"]]
    assert batches[0][0] == Prompt("a", ({"role": "user", "content": "first"},), f"{path}:1", {})
    fresh = PromptReader(InputConfig(path=str(path), dedupe=True))  # iter_batches alone also dedupes
    assert [p.id for b in fresh.iter_batches() for p in b] == ["a", "b", "c"]


def test_no_duplicates_returns_the_row_count(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": str(i), "prompt": "x"} for i in range(10)])
    assert PromptReader(InputConfig(path=str(path))).check_duplicates() == 10


def test_ids_that_share_a_hash_are_not_duplicates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Duplicates are found on 64-bit hashes and confirmed on the ids themselves: with every id hashed alike (the
    worst collision there is), distinct ids are no duplicates, and a real repeat is named as before."""
    from pipeline.inputs import reader as reader_module

    monkeypatch.setattr(reader_module, "hash", lambda _: 7, raising=False)  # the builtin the reader hashes with
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": str(i), "prompt": "x"} for i in range(10)])
    assert PromptReader(InputConfig(path=str(path))).check_duplicates() == 10
    again = write_jsonl(tmp_path / "again.jsonl", [{"id": i, "prompt": "x"} for i in ("a", "b", "a", "c")])
    with pytest.raises(
        InputError, match=rf"1 ids occur more than once \(1 extra rows\): 'a' at {again}:1, {again}:3\."
    ):
        PromptReader(InputConfig(path=str(again))).check_duplicates()
    assert PromptReader(InputConfig(path=str(again), dedupe=True)).check_duplicates() == 3


# ---------------------------------------------------------------- unreadable input


def test_missing_path_and_empty_glob_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope.jsonl: no such file or folder"):
        PromptReader(InputConfig(path=str(tmp_path / "nope.jsonl"))).files()
    with pytest.raises(InputError, match=r"\*.parquet: no input files match"):
        PromptReader(InputConfig(path=str(tmp_path / "*.parquet"))).files()
    with pytest.raises(InputError, match=r"no .jsonl, .parquet or .arrow files"):
        list(PromptReader(InputConfig(path=str(tmp_path))).iter_batches())
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(InputError, match=r"x.csv: cannot tell the format"):
        PromptReader(InputConfig(path=str(tmp_path / "x.csv"))).files()
    with pytest.raises(InputError, match="not a datasets save_to_disk folder"):
        PromptReader(InputConfig(path=str(tmp_path), format="datasets")).files()


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        pytest.param("bad.parquet", b"PAR1 this is not parquet", "bad.parquet: cannot read Parquet", id="parquet"),
        pytest.param("bad.jsonl.gz", b"\x1f\x8b not gzip at all", "bad.jsonl.gz: cannot read", id="gzip"),
        pytest.param("bad.arrow", b"garbage garbage garbage", "bad.arrow: cannot read Arrow", id="arrow"),
    ],
)
def test_corrupt_files_are_input_errors(tmp_path: Path, name: str, content: bytes, match: str) -> None:
    (tmp_path / name).write_bytes(content)
    reader = PromptReader(InputConfig(path=str(tmp_path / name)))
    with pytest.raises(InputError, match=match):
        list(reader.iter_batches())
    with pytest.raises(InputError, match=match):
        reader.check_duplicates()


def test_bad_format_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"input.format 'csv'"):
        PromptReader(InputConfig(format="csv"))


# ---------------------------------------------------------------- streaming


def test_batches_hold_batch_rows_across_files(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"id": f"a{i}", "prompt": "x"} for i in range(7)])
    write_jsonl(tmp_path / "b.jsonl", [{"id": f"b{i}", "prompt": "x"} for i in range(6)])
    batches = list(PromptReader(InputConfig(path=str(tmp_path), batch_rows=5)).iter_batches())
    assert [len(b) for b in batches] == [5, 5, 3]


def test_a_large_jsonl_file_is_streamed_not_materialised(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    filler = "lorem ipsum dolor sit amet " * 12
    with path.open("wb") as fh:
        for i in range(50_000):
            fh.write(orjson.dumps({"id": f"r{i}", "prompt": f"{i} {filler}", "cat": "c"}) + b"\n")
    assert path.stat().st_size > 15_000_000
    reader = PromptReader(InputConfig(path=str(path), batch_rows=1000, keep_fields=("cat",)))
    batches = reader.iter_batches()
    tracemalloc.start()
    try:
        first = next(batches)
        after_first = tracemalloc.get_traced_memory()[1]
        rows = len(first) + sum(len(next(batches)) for _ in range(9))
        after_ten = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    rows += sum(len(batch) for batch in batches)
    assert len(first) == 1000 and rows == 50_000
    assert after_first < 3_000_000  # one batch, not the file (the file as Prompts would be over 50 MB)
    assert after_ten < 4_000_000  # the batch held here and the one being built, never the earlier ones


def test_parquet_is_read_one_row_group_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    table = pa.table({"id": [f"r{i}" for i in range(10_000)], "prompt": [f"prompt number {i}" for i in range(10_000)]})
    pq.write_table(table, path, row_group_size=1000, compression="zstd")
    column = pq.ParquetFile(path).metadata.row_group(9).column(1)
    start = column.dictionary_page_offset or column.data_page_offset
    with path.open("r+b") as fh:  # wreck the last row group's prompt pages; the footer stays intact
        fh.seek(start + 16)
        fh.write(b"\xff" * (column.total_compressed_size - 32))
    batches = PromptReader(InputConfig(path=str(path), batch_rows=500)).iter_batches()
    seen = [next(batches) for _ in range(18)]  # the first nine row groups arrive before the tenth is read
    assert seen[-1][-1].id == "r8999"
    with pytest.raises(InputError, match=r"in.parquet: cannot read Parquet"):
        next(batches)


def test_scan_ids_reads_only_the_id_column_when_it_has_no_nulls(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a", "", "c"], "prompt": [None, "x", "y"]}), path)
    reader = PromptReader(InputConfig(path=str(path)))
    expected = ["a", "bad-input:in.parquet:1", "c"]
    assert [i for ids in reader.scan_ids() for i in ids] == expected
    assert [p.id for b in reader.iter_batches() for p in b] == expected
    pq.write_table(pa.table({"id": ["a", None], "prompt": ["x", "hello"]}), path)
    assert [i for ids in reader.scan_ids() for i in ids] == ["a", content_id(HELLO)]


row_values = st.one_of(
    st.none(), st.text(max_size=5), st.integers(-5, 5), st.booleans(), st.lists(st.text(), max_size=2)
)
message = st.fixed_dictionaries({}, optional={"role": st.sampled_from(["user", "bot", 1]), "content": row_values})
rows_strategy = st.lists(
    st.fixed_dictionaries(
        {}, optional={"id": row_values, "prompt": row_values, "messages": st.lists(message, max_size=2)}
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, batch_rows=st.integers(1, 5))
def test_scan_ids_agree_with_iter_batches(rows: list[dict[str, Any]], batch_rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, write in (("in.jsonl", None), ("in.parquet", pq.write_table)):
            path = Path(tmp) / name
            if write is None:
                write_jsonl(path, rows)
            else:
                # Parquet columns have one type each: keep the string values, the rest become nulls.
                columns = {k: [r.get(k) if isinstance(r.get(k), str) else None for r in rows] for k in ("id", "prompt")}
                write(pa.table(columns, schema=pa.schema([("id", pa.string()), ("prompt", pa.string())])), path)
            reader = PromptReader(InputConfig(path=str(path), batch_rows=batch_rows))
            items = [item for batch in reader.iter_batches() for item in batch]
            assert [i for ids in reader.scan_ids() for i in ids] == [item.id for item in items]
            assert all(len(b) <= batch_rows for b in reader.iter_batches())


# ---------------------------------------------------------------- the shipped sample


def test_sample_prompts_file() -> None:
    reader = PromptReader(InputConfig(path=str(ROOT / "data/sample_prompts.jsonl"), keep_fields=("category", "lang")))
    assert reader.check_duplicates() == 300
    items = [item for batch in reader.iter_batches() for item in batch]
    bad = [item for item in items if isinstance(item, BadInput)]
    good = [item for item in items if isinstance(item, Prompt)]
    assert len(bad) == 5 and all(b.id.startswith(("sample-", "bad-input:")) for b in bad)
    assert {p.extra["category"] for p in good} >= {"math", "code", "reasoning", "writing", "knowledge"}
    assert len({p.extra["lang"] for p in good}) >= 8
    assert any(p.messages[0]["role"] == "system" for p in good)
    multi = [p for p in good if sum(m["role"] == "user" for m in p.messages) > 1]
    assert multi and all(p.messages[-1]["role"] == "user" for p in multi)
    assert len({p.messages[-1]["content"] for p in good}) > 250
