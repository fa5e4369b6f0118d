"""`--format specforge` against SpecForge's own scripts (tests/fixtures/specforge, copied unmodified, MIT):
its validator accepts the export with `--expect-reasoning --strict-think-markers`, and its expander, run on the
export, writes exactly what `--expand-turns` writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.dataset.export import ExportOptions
from pipeline.dataset.exporters import export
from tests.helpers.conversation_runs import conv_row, make_conversation_run, rows
from tests.helpers.paths import SPECFORGE


def validate(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    script = SPECFORGE / "validate_regenerated_data.py"
    return subprocess.run(
        [sys.executable, str(script), "--data-path", str(path), *flags], capture_output=True, text=True, timeout=60
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_specforge_rows_pass_its_validator(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run", [r for r in rows() if r["id"] != "kept"])
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "specforge", out)
    assert summary["file_format"] == "jsonl" and summary["rows"] == 2 and summary["skipped"] == {}
    data = out / summary["files"][0]
    done = validate(data, "--expect-reasoning", "--strict-think-markers")
    assert done.returncode == 0, done.stderr
    assert "rows: 2" in done.stdout and "assistant messages: 4" in done.stdout
    multi = lines(data)[0]
    assert set(multi) == {"id", "status", "conversations"} and multi["status"] == "success"
    assert multi["conversations"][:3] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "multi answer 0", "reasoning_content": "multi reasoning 0"},
    ]


def test_rows_its_validator_would_refuse_are_left_out_and_counted(tmp_path: Path) -> None:
    marker = conv_row("marker", ["q"])
    marker["answer"] = "leftover </think> in the answer"
    empty_user = conv_row("empty-user", ["  "])
    no_reasoning = conv_row("no-reasoning", ["q"])
    no_reasoning["reasoning"] = ""
    make_conversation_run(tmp_path / "run", [*rows(), marker, empty_user, no_reasoning])
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "specforge", out)
    # "kept": its first assistant turn came from the input and has no reasoning to train on
    assert summary["skipped"] == {"missing_reasoning": 2, "think_marker": 1, "empty_content": 1}
    assert [r["id"] for r in lines(out / summary["files"][0])] == ["multi", "single"]
    done = validate(out / summary["files"][0], "--expect-reasoning", "--strict-think-markers")
    assert done.returncode == 0, done.stderr
    assert "left out" in (out / "README.md").read_text() and "`think_marker`" in (out / "README.md").read_text()


def test_expand_turns_is_what_specforges_expander_writes(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run", [r for r in rows() if r["id"] != "kept"])
    whole = export(tmp_path / "run", "specforge", tmp_path / "whole")
    expanded = export(tmp_path / "run", "specforge", tmp_path / "expanded", ExportOptions(expand_turns=True))
    theirs = tmp_path / "theirs.jsonl"
    script = SPECFORGE / "expand_reasoning_conversations.py"
    source = tmp_path / "whole" / whole["files"][0]
    done = subprocess.run(
        [sys.executable, str(script), "--input-file-path", str(source), "--output-file-path", str(theirs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ours = lines(tmp_path / "expanded" / expanded["files"][0])
    assert ours == lines(theirs)
    assert [r["id"] for r in ours] == ["multi#turn0", "multi#turn1", "multi#turn2", "single#turn0"]
    second = ours[1]["conversations"]
    assert "reasoning_content" not in second[2] and second[-1]["reasoning_content"] == "multi reasoning 1"
    # Every expanded row's target turn carries reasoning; its history, as SpecForge's own rows, does not.
    assert validate(tmp_path / "expanded" / expanded["files"][0], "--strict-think-markers").returncode == 0


def test_a_turns_last_run_expands_to_its_generated_turns(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    summary = export(tmp_path / "run", "specforge", tmp_path / "out", ExportOptions(expand_turns=True))
    got = lines(tmp_path / "out" / summary["files"][0])
    kept = [r for r in got if r["source_id"] == "kept"]
    assert [r["id"] for r in kept] == ["kept#turn1"]
    assert kept[0]["conversations"][1] == {"role": "assistant", "content": "an answer from the input"}


@pytest.mark.parametrize("thinking", [False], ids=["thinking-off"])
def test_a_run_without_thinking_exports_for_expect_non_reasoning(tmp_path: Path, thinking: bool) -> None:
    plain = [{**r, "reasoning": None, "turns": [{**t, "reasoning": None} for t in r["turns"]]} for r in rows()]
    make_conversation_run(tmp_path / "run", plain, thinking=thinking)
    summary = export(tmp_path / "run", "specforge", tmp_path / "out")
    assert summary["rows"] == 3
    done = validate(tmp_path / "out" / summary["files"][0], "--expect-non-reasoning", "--strict-think-markers")
    assert done.returncode == 0, done.stderr
