"""`regen init` on the input shapes the reader accepts and on datasets it cannot use (issue 38), with files written
here: an OpenAI Batch file gets `input.format = "openai-batch"` and runs as written; a dataset none of whose rows can
be sent gets no config (exit 2, the reason); repeated ids are counted by the run's own id rule; `select = "invalid"`
is written where it narrows the run; `regen run`'s refusal names the key to set, never `regen init`."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.config import load_config
from tests.helpers.exactly_once import committed_ids
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen

SIM = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "50")


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def _batch_line(i: int, **body: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"What is {i} + 1?"}]
    return {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini", "messages": messages, **body}}  # fmt: skip


def test_init_recognises_an_openai_batch_file_and_its_config_runs(tmp_path: Path, sim) -> None:
    server = sim(*SIM)
    data = _jsonl(tmp_path / "batch.jsonl", [_batch_line(i, max_tokens=100) for i in range(20)])
    out = tmp_path / "regen.toml"
    result = regen("init", str(data), "--endpoint", server.url, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "cannot be read" not in result.stderr
    text = out.read_text()
    assert tomllib.loads(text)["input"]["format"] == "openai-batch"
    assert "OpenAI Batch request lines" in text and "max_bad_share" not in text
    # the bodies' max_tokens is not honoured unless the user says so: the line says what it would do
    (line,) = [x for x in text.splitlines() if x.startswith("request_overrides = false")]
    assert "the bodies set max_tokens" in line
    assert load_config(str(out), []).input.format == "openai-batch"
    run = regen("run", str(out), "--output", str(tmp_path / "run"), "--no-progress")
    assert run.returncode == 0, run.stderr
    assert sorted(committed_ids(tmp_path / "run", "shards")) == sorted(f"req-{i}" for i in range(20))


def test_run_on_a_batch_file_read_as_chat_rows_names_the_format_key(tmp_path: Path, sim) -> None:
    server = sim(*SIM)
    data = _jsonl(tmp_path / "batch.jsonl", [_batch_line(i) for i in range(20)])
    cfg = tmp_path / "job.toml"
    cfg.write_text(
        f'[input]\npath = "{data}"\n[output]\ndir = "{tmp_path / "run"}"\n[[endpoints]]\nurl = "{server.url}"\n'
    )
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 2, result.stderr
    assert 'fix: input.format = "openai-batch" (the rows are OpenAI Batch lines' in result.stderr
    assert "regen init" not in result.stderr  # the fix is a key; init may be what wrote this config
    assert server.stats()["requests"] == 0 and not (tmp_path / "run").exists()


_IMAGE = {"messages": [{"role": "user", "content": "<image>What is this?"}, {"role": "assistant", "content": "A cat"}],
          "images": ["cat.png"]}  # fmt: skip
UNUSABLE = {
    "empty": ([], "no rows, so there is nothing to write a config for"),
    "invalid-json": (["{not json", "[1, 2"], "none of its 2 rows can be sent"),
    "unknown-fields": ([{"text": "hello"}, {"text": "world"}], "the rows' fields are text; regen reads a conversation"),
    "images": ([_IMAGE, _IMAGE], "in its 'images' column"),
}


@pytest.mark.parametrize("kind", list(UNUSABLE), ids=list(UNUSABLE))
def test_init_writes_no_config_for_a_dataset_none_of_whose_rows_can_be_sent(tmp_path: Path, kind: str) -> None:
    rows, said = UNUSABLE[kind]
    data = tmp_path / "data.jsonl"
    data.write_text("".join((r if isinstance(r, str) else orjson.dumps(r).decode()) + "\n" for r in rows))
    out = tmp_path / "regen.toml"
    result = regen("init", str(data), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and "no config was written" in result.stderr
    assert not out.exists() and not result.stdout
    assert regen("init", str(data)).stdout == ""  # nor to stdout


def test_a_missing_local_input_is_no_such_file_not_a_hub_lookup(tmp_path: Path) -> None:
    for command in (("init", "data/no-such-file.jsonl"), ("audit", "data/no-such-file.jsonl")):
        result = regen(*command)
        assert result.returncode == 2, result.stderr
        assert "data/no-such-file.jsonl: no such file or folder" in result.stderr
        assert "Hugging Face" not in result.stderr


def test_init_counts_repeated_ids_by_the_runs_rule_tools_included(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Sunny."}]
    tool = lambda name: [{"type": "function", "function": {"name": name, "parameters": {}}}]  # noqa: E731
    rows = [{"messages": chat, "tools": tool("a")}, {"messages": chat, "tools": tool("b")},  # two prompts
            {"messages": chat, "tools": tool("a")}]  # fmt: skip  # a repeat of the first
    data = _jsonl(tmp_path / "chats.jsonl", rows)
    result = regen("init", str(data))
    assert result.returncode == 0, result.stderr
    assert "1 rows in the first 3 repeat an earlier row's id" in result.stderr


def _turn(answer: str, reasoning: str = "Let me think about it.") -> dict[str, Any]:
    return {"role": "assistant", "content": answer, "reasoning_content": reasoning}


def _row(i: int, answer: str, **kw: Any) -> dict[str, Any]:
    return {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i}?"}, _turn(answer, **kw)]}


SELECTIONS = {
    "some-broken": ([_row(i, "" if i % 2 else "Fine.") for i in range(10)], 'select = "invalid"'),
    "all-broken": (
        [_row(i, "") for i in range(10)],
        "# Every row's stored turns fail the audit (answer_in_reasoning 10)",
    ),
    "no-reasoning": ([_row(i, "Fine.", reasoning="") for i in range(10)], "store no reasoning at all"),
    "prompts-only": ([{"id": f"r{i}", "prompt": f"Question {i}?"} for i in range(10)], "(prompts only)"),
    "some-without-reasoning": (
        [_row(i, "Fine.", reasoning="" if i < 3 else "Hm.") for i in range(10)],
        'select = "invalid"',
    ),
}


@pytest.mark.parametrize("kind", list(SELECTIONS), ids=list(SELECTIONS))
def test_init_selects_the_failing_rows_exactly_where_that_narrows_the_run(tmp_path: Path, kind: str) -> None:
    rows, said = SELECTIONS[kind]
    result = regen("init", str(_jsonl(tmp_path / "chats.jsonl", rows)))
    assert result.returncode == 0, result.stderr
    assert said in result.stdout
    assert ('select = "invalid"' in result.stdout) == (said == 'select = "invalid"')
    assert ("# Every row's stored turns fail" in result.stdout) == (kind == "all-broken")


def test_init_on_the_repositorys_broken_sample_regenerates_every_readable_row(tmp_path: Path) -> None:
    data = tmp_path / "broken.jsonl"  # every answer empty; a tool and an image row it cannot send
    data.write_bytes((ROOT / "data" / "sample_conversations.jsonl").read_bytes())
    result = regen("init", str(data))
    assert result.returncode == 0, result.stderr
    assert "select = " not in result.stdout and "fail the audit (empty_response 60)" in result.stdout
    assert "max_bad_share = 1" in result.stdout  # the 2 it cannot send go to rejects; the rest are sent
