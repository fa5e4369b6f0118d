"""Whole conversations out of shard rows: every assistant turn with its own reasoning (from `turns`), in the chat,
ShareGPT and TRL prompt/completion shapes, with reasoning as a field, inline or dropped, and expanded per turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest

from pipeline.dataset.export import ExportOptions
from pipeline.dataset.exporters import export
from pipeline.dataset.shapes import conversation, targets
from pipeline.errors import ConfigError
from tests.helpers.conversation_runs import make_conversation_run, rows


def load(out: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    builder = "json" if summary["file_format"] == "jsonl" else "parquet"
    files = str(out / summary["data_files"]["train"])
    cache = str(out.parent / "hf-cache")
    return list(datasets.load_dataset(builder, data_files=files, split="train", cache_dir=cache))


def test_conversation_puts_each_turns_reasoning_back() -> None:
    multi, _, kept = rows()
    conv = conversation(multi)
    assert [m.role for m in conv] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assistant = [m for m in conv if m.role == "assistant"]
    assert [(m.content, m.reasoning) for m in assistant] == [
        (f"multi answer {k}", f"multi reasoning {k}") for k in range(3)
    ]
    assert [t.index for t in targets(conv)] == [0, 1, 2]
    assert all(m.reasoning is None for m in targets(conv)[2].history)
    conv = conversation(kept)
    assert [(m.content, m.reasoning, m.generated) for m in conv if m.role == "assistant"] == [
        ("an answer from the input", None, False),
        ("kept answer 0", "kept reasoning 0", True),
    ]
    assert [t.index for t in targets(conv)] == [1]  # the kept turn is no target


def _assistant(content: str, reasoning: str | None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "reasoning_content": reasoning}


@pytest.mark.parametrize("file_format", ["parquet", "jsonl"])
def test_chat_field_is_the_default_and_covers_every_turn(tmp_path: Path, file_format: str) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "chat", out, ExportOptions(file_format=file_format))
    assert summary["reasoning"] == "field" and summary["rows"] == 3
    got = {r["id"]: r for r in load(out, summary)}

    def plain(role: str, content: str) -> dict[str, Any]:  # JSONL: no reasoning key but on assistant turns
        return {"role": role, "content": content, **({"reasoning_content": None} if file_format == "parquet" else {})}

    assert got["multi"]["messages"] == [
        plain("system", "be brief"),
        plain("user", "hi"),
        _assistant("multi answer 0", "multi reasoning 0"),
        plain("user", "and then?"),
        _assistant("multi answer 1", "multi reasoning 1"),
        plain("user", "last one"),
        _assistant("multi answer 2", "multi reasoning 2"),
    ]
    assert got["kept"]["messages"][1] == _assistant("an answer from the input", None)
    assert got["multi"]["completion_tokens"] == 102 and got["multi"]["source"] == "unit"


def test_inline_puts_a_think_block_on_every_generated_turn(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "chat", out, ExportOptions(reasoning="inline"))
    got = {r["id"]: r for r in load(out, summary)}
    contents = [m["content"] for m in got["multi"]["messages"] if m["role"] == "assistant"]
    assert contents == [f"<think>\nmulti reasoning {k}\n</think>\n\nmulti answer {k}" for k in range(3)]
    assert set(got["multi"]["messages"][0]) == {"role", "content"}
    kept = [m["content"] for m in got["kept"]["messages"] if m["role"] == "assistant"]
    assert kept == ["an answer from the input", "<think>\nkept reasoning 0\n</think>\n\nkept answer 0"]


def test_none_drops_the_reasoning(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "chat", out, ExportOptions(reasoning="none"))
    got = {r["id"]: r for r in load(out, summary)}
    assert got["single"]["messages"] == [
        {"role": "user", "content": "only question"},
        {"role": "assistant", "content": "single answer 0"},
    ]
    message = pq.read_schema(out / "data" / "train-00000.parquet").field("messages").type.value_type
    assert [message.field(i).name for i in range(message.num_fields)] == ["role", "content"]


def test_sharegpt_is_inline_by_default_and_can_carry_the_field(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "sharegpt", out)
    multi = {r["id"]: r for r in load(out, summary)}["multi"]["conversations"]
    assert [t["from"] for t in multi] == ["system", "human", "gpt", "human", "gpt", "human", "gpt"]
    assert multi[2]["value"] == "<think>\nmulti reasoning 0\n</think>\n\nmulti answer 0"
    summary = export(tmp_path / "run", "sharegpt", out, ExportOptions(reasoning="field"))
    multi = {r["id"]: r for r in load(out, summary)}["multi"]["conversations"]
    assert multi[4] == {"from": "gpt", "value": "multi answer 1", "reasoning_content": "multi reasoning 1"}


def is_trl_conversational_prompt_completion(example: dict[str, Any]) -> bool:
    """TRL's rules for a conversational prompt/completion example (trl.data_utils.is_conversational and the
    SFT trainer's prompt-completion branch, re-stated): `prompt` and `completion` are lists of messages, each a
    dict with `role` and `content`; the completion holds the assistant turn(s) the loss is computed on."""
    for key in ("prompt", "completion"):
        messages = example.get(key)
        if not isinstance(messages, list) or not messages:
            return False
        if not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
            return False
    return all(m["role"] == "assistant" for m in example["completion"])


def test_prompt_completion_is_trls_conversational_shape(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "prompt-completion", out)
    got = {r["id"]: r for r in load(out, summary)}
    assert all(is_trl_conversational_prompt_completion(r) for r in got.values())
    multi = got["multi"]
    assert multi["prompt"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "multi answer 0"},
        {"role": "user", "content": "and then?"},
        {"role": "assistant", "content": "multi answer 1"},
        {"role": "user", "content": "last one"},
    ]
    assert multi["completion"] == [_assistant("multi answer 2", "multi reasoning 2")]


def test_expand_turns_gives_one_row_per_generated_turn(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "prompt-completion", out, ExportOptions(expand_turns=True))
    got = {r["id"]: r for r in load(out, summary)}
    assert sorted(got) == ["kept#turn1", "multi#turn0", "multi#turn1", "multi#turn2", "single#turn0"]
    second = got["multi#turn1"]
    assert second["source_id"] == "multi" and second["assistant_turn_index"] == 1
    assert [m["content"] for m in second["prompt"]] == ["be brief", "hi", "multi answer 0", "and then?"]
    assert second["completion"] == [_assistant("multi answer 1", "multi reasoning 1")]
    assert (second["prompt_tokens"], second["completion_tokens"], second["reasoning_tokens"]) == (20, 101, 61)
    summary = export(tmp_path / "run", "chat", out, ExportOptions(expand_turns=True))
    chat = {r["id"]: r for r in load(out, summary)}["multi#turn1"]["messages"]
    assert [m["reasoning_content"] for m in chat] == [None, None, None, None, "multi reasoning 1"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"format": "chat", "reasoning": "hidden"}, "unknown reasoning mode"),
        ({"format": "openai-batch-output", "expand_turns": True}, "expand-turns"),
        ({"format": "specforge", "reasoning": "inline"}, "reasoning_content"),
        ({"format": "tokenized"}, "--tokenizer"),
        ({"format": "chat", "tokenizer": Path("tok")}, "for --format tokenized"),
    ],
    ids=["reasoning", "expand", "specforge-inline", "no-tokenizer", "tokenizer-elsewhere"],
)
def test_bad_combinations(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    make_conversation_run(tmp_path / "run")
    with pytest.raises(ConfigError, match=match):
        options = {name: value for name, value in kwargs.items() if name != "format"}
        export(tmp_path / "run", kwargs["format"], tmp_path / "out", ExportOptions(**options))
