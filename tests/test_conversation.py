"""Conversations as datasets hold them (issue 14): shapes, which turns are generated, the request for turn k,
and the reader on ShareGPT, content parts, `.json` arrays and several samples per row."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import conversation as conv
from pipeline.config import GenerationConfig, InputConfig
from pipeline.errors import InputError
from pipeline.inputs import conversations
from pipeline.inputs.reader import PromptReader
from pipeline.records import BadInput, Prompt

U1, U2 = {"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}
SYS = {"role": "system", "content": "be brief"}
EMPTY = {"role": "assistant", "content": ""}


def _read(path: Path, gen: GenerationConfig | None = None, **kw: object) -> list[Prompt | BadInput]:
    reader = PromptReader(InputConfig(path=str(path), **kw), generation=gen)
    return [item for batch in reader.iter_batches() for item in batch]


def test_sharegpt_and_role_content_conversations_normalise_alike() -> None:
    sharegpt = [{"from": "system", "value": "be brief"}, {"from": "human", "value": "q1"}, {"from": "gpt", "value": ""}]
    roles = [SYS, U1, {"role": "assistant", "content": None}]
    assert (
        conversations.parse(sharegpt, "conversations")
        == conversations.parse(roles, "conversations")
        == (SYS, U1, EMPTY)
    )


def test_text_parts_are_joined_and_other_parts_refused() -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "text", "text": "here"}]
    assert conversations.parse([{"role": "user", "content": parts}], "messages") == (
        {"role": "user", "content": "look\nhere"},
    )
    image = [{"type": "text", "text": "what is it"}, {"type": "image_url", "image_url": {"url": "x"}}]
    with pytest.raises(
        conv.ConversationError, match=r"messages\[0\]\.content\[1\] is an 'image_url' part: the run is text-only"
    ):
        conversations.parse([{"role": "user", "content": image}], "messages")


@pytest.mark.parametrize(
    ("messages", "mode", "positions"),
    [
        pytest.param([U1], "all", (1,), id="prompt"),
        pytest.param([SYS, U1, EMPTY, U2, EMPTY], "all", (2, 4), id="all-two-turns"),
        pytest.param([SYS, U1, EMPTY, U2], "all", (2, 4), id="all-trailing-user"),
        pytest.param([SYS, U1, EMPTY, U2, EMPTY], "last", (4,), id="last"),
        pytest.param([U1, EMPTY, U2], "last", (3,), id="last-trailing-user"),
    ],
)
def test_turn_positions(messages: list[dict], mode: str, positions: tuple[int, ...]) -> None:
    assert conv.turn_positions(messages, mode) == positions


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        pytest.param([SYS, EMPTY, U1], "follows no user turn", id="assistant-first"),
        pytest.param([U1, EMPTY, EMPTY], "follows no user turn", id="two-assistants"),
        pytest.param([SYS], "no user turn", id="no-user"),
    ],
)
def test_conversations_that_cannot_be_regenerated(messages: list[dict], match: str) -> None:
    with pytest.raises(conv.ConversationError, match=match):
        conv.turn_positions(messages, "all")


def test_the_request_for_turn_k_carries_the_regenerated_history() -> None:
    messages = (SYS, U1, {"role": "assistant", "content": "old 1"}, U2, {"role": "assistant", "content": "old 2"})
    positions = conv.turn_positions(messages, "all")
    assert conv.request(messages, positions, 0, []) == [SYS, U1]
    assert conv.request(messages, positions, 1, ["new 1"]) == [SYS, U1, {"role": "assistant", "content": "new 1"}, U2]
    with_reasoning = conv.request(messages, positions, 1, ["new 1"], ["thought 1"])
    assert with_reasoning[2] == {"role": "assistant", "content": "new 1", "reasoning_content": "thought 1"}
    # "last" keeps the history as given, old answers included
    assert conv.request(messages, (4,), 0, []) == list(messages[:4])


def test_reader_takes_sharegpt_rows_with_empty_answers_and_rejects_a_tool_result_without_a_call(
    tmp_path: Path,
) -> None:
    rows = [
        {"id": "a", "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": ""}]},
        {"id": "b", "messages": [U1, {"role": "tool", "content": "42"}]},
        {"id": "c", "conversations": [U1, {"role": "assistant", "content": ""}, U2]},
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    a, b, c = _read(path)
    assert isinstance(a, Prompt) and a.messages == (U1, EMPTY) and a.positions == (1,)
    assert isinstance(b, BadInput) and "messages[1]: a tool result that answers no tool call" in b.detail
    assert isinstance(c, Prompt) and c.positions == (1, 3)


def test_reader_streams_a_json_array_file(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "conversations": [{"from": "human", "value": f"q{i}"}]} for i in range(25)]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(rows, indent=2))
    items = _read(path, batch_rows=4)
    assert [i.id for i in items] == [f"r{i}" for i in range(25)]
    assert items[3].source == f"{path}:3"


def test_parquet_conversations_column_is_found_in_auto_mode(tmp_path: Path) -> None:
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    table = pa.table(
        {
            "id": ["p"],
            "conversations": pa.array(
                [[{"from": "human", "value": "q1"}, {"from": "gpt", "value": None}]], pa.list_(turn)
            ),
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    (item,) = _read(tmp_path / "in.parquet")
    assert isinstance(item, Prompt) and item.messages == (U1, EMPTY)


def test_samples_give_one_prompt_per_sample_with_its_temperature(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(orjson.dumps({"id": "x", "prompt": "q1"}) + b"\n" + orjson.dumps({"id": "y", "prompt": ""}))
    gen = GenerationConfig(samples=3, temperatures=(0.2, 0.6, 1.0))
    items = _read(path, gen)
    assert [i.id for i in items] == ["x#0", "x#1", "x#2", "y#0", "y#1", "y#2"]
    assert [i.temperature for i in items[:3] if isinstance(i, Prompt)] == [0.2, 0.6, 1.0]
    assert {i.source_id for i in items[:3] if isinstance(i, Prompt)} == {"x"}
    assert all(isinstance(i, BadInput) for i in items[3:])
    reader = PromptReader(InputConfig(path=str(path)), generation=gen)
    assert [i for ids in reader.scan_ids() for i in ids] == [i.id for i in items]  # resume sees the same ids


def test_a_dataset_named_as_on_the_hub_is_read_from_the_local_cache(tmp_path: Path, monkeypatch) -> None:
    """`input.path = "org/name[:split]"`: the snapshot of refs/main in the Hugging Face cache, as the Hub lays a
    dataset out (blobs behind symlinks, data/<split>-*.parquet), streamed like a local file."""
    repo = tmp_path / "hub" / "datasets--acme--chats"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "abc123" / "data"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    for split, n in (("train", 3), ("test", 2)):
        rows = [[{"from": "human", "value": f"{split} q{i}"}, {"from": "gpt", "value": ""}] for i in range(n)]
        table = pa.table({"id": [f"{split}-{i}" for i in range(n)], "conversations": pa.array(rows, pa.list_(turn))})
        pq.write_table(table, blobs / f"blob-{split}")
        (snapshot / f"{split}-00000-of-00001.parquet").symlink_to(blobs / f"blob-{split}")
    (repo / "snapshots" / "abc123" / "README.md").write_text("# card")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    assert [p.id for p in _read(Path("acme/chats"))] == ["train-0", "train-1", "train-2"]
    assert [p.id for p in _read(Path("acme/chats:test"))] == ["test-0", "test-1"]
    with pytest.raises(InputError, match="no such file or folder, nor a dataset in the local Hugging Face cache"):
        _read(Path("acme/other"))
