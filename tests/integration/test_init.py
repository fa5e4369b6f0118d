"""`regen init` (issue 28): on every real dataset in ../shared/datasets/ (read where they are), the config it writes
loads strictly, marks the lines to check, and runs as written against a simulator over real HTTP."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pipeline.config import load_config
from tests.helpers.exactly_once import committed_ids
from tests.helpers.paths import ROOT, SHARED, needs_shared
from tests.helpers.processes import regen

DATASETS = SHARED / "datasets"
pytestmark = needs_shared("datasets")
TEXT = [
    "fastchat_dummy_conversation.json",
    "llamafactory/glaive_toolcall_en_demo.json",
    "llamafactory/reason_tool_use_demo_50.jsonl",
    "llamafactory/v1_sft_demo.jsonl",
]
SIM = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen25",
       "--mean-output-tokens", "200")  # fmt: skip


def _init(tmp_path: Path, name: str, url: str) -> Path:
    out = tmp_path / "regen.toml"
    result = regen("init", str(DATASETS / name), "--endpoint", url, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}: read the " in result.stderr
    return out


@pytest.mark.parametrize("name", TEXT, ids=[Path(n).stem for n in TEXT])
def test_init_writes_a_config_that_runs_as_written(tmp_path: Path, sim, name: str) -> None:
    server = sim(*SIM)
    cfg = _init(tmp_path, name, server.url)
    text = cfg.read_text()
    loaded = load_config(str(cfg), [])  # strict: every key it writes is a real one
    assert loaded.generation.model == "Qwen3.6-27B" and dict(tomllib.loads(text)["expect"]) == {
        "reasoning_parser": "qwen3",
        "tool_call_parser": "qwen25",
    }
    for key in ("path = ", "keep_fields = ", "dir = ", "model = ", "api_key_env = "):
        (line,) = [x for x in text.splitlines() if x.startswith(key)]
        assert "# CHECK: " in line, line
    run = regen("run", str(cfg), "--output", str(tmp_path / "run"), "--no-progress")
    assert run.returncode == 0, run.stderr
    assert committed_ids(tmp_path / "run", "shards"), run.stderr  # something was generated and accepted


def test_init_suggests_dedupe_and_counts_repeats_as_the_run_does(tmp_path: Path, sim) -> None:
    server = sim(*SIM)
    name = "llamafactory/glaive_toolcall_en_demo.json"
    result = regen("init", str(DATASETS / name), "--endpoint", server.url, "--out", str(tmp_path / "regen.toml"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "regen.toml").read_text()
    # exact duplicate rows, no ids; no turn broken but for its missing reasoning (an answer echoing a long run of
    # zeros from its prompt is a copy, not a loop: issue 36)
    assert "dedupe = true" in text and "select = " not in text and "store no reasoning at all" in text
    # the run's id hash covers `tools`: 35 rows repeat an earlier one, not the 38 a hash of the turns alone finds
    assert "35 rows in the first 300 repeat an earlier row's id" in result.stderr
    run = regen("run", str(tmp_path / "regen.toml"), "--output", str(tmp_path / "run"), "--no-progress")
    assert run.returncode == 0, run.stderr
    assert "265 prompts finished" in run.stderr  # 300 rows less the 35 repeats
    # and the repaired dataset gives every copy its conversation's new turns: nothing fails the audit any more
    out = tmp_path / "repaired"
    exported = regen("export", str(tmp_path / "run"), "--format", "repaired", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert "300 rows" in exported.stdout and "35 of the regenerated rows repeat an earlier row" in exported.stdout
    audit = regen("audit", str(out / "glaive_toolcall_en_demo.json"))
    assert audit.returncode == 0 and "failing: 0 rows (0.0%)" in audit.stdout, audit.stdout
    plain = _init(tmp_path / "b", "fastchat_dummy_conversation.json", server.url).read_text()
    assert "select = " not in plain and "store no reasoning at all" in plain  # nothing to repair: add reasoning


def test_init_says_a_server_without_a_tool_call_parser_stops_a_run_with_tools(tmp_path: Path, sim) -> None:
    server = sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3")
    out = tmp_path / "regen.toml"
    result = regen("init", str(DATASETS / "llamafactory/glaive_toolcall_en_demo.json"), "--endpoint", server.url,
                   "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "parses no tool calls: `regen run` stops before sending (exit 3)" in out.read_text()
    run = regen("run", str(out), "--no-progress", "--limit", "2")
    assert run.returncode == 3 and "client.allow_no_tool_parser" in run.stderr


def test_init_fits_max_tokens_in_the_servers_context(tmp_path: Path, sim) -> None:
    server = sim(*SIM, "--context-length", "4096")
    cfg = _init(tmp_path, "fastchat_dummy_conversation.json", server.url)
    assert load_config(str(cfg), []).generation.max_tokens == 2048
    assert "half the server's context of 4096 tokens" in cfg.read_text()
    run = regen("run", str(cfg), "--output", str(tmp_path / "run"), "--no-progress", "--limit", "20")
    assert run.returncode == 0, run.stderr


def test_init_on_an_image_dataset_writes_nothing(tmp_path: Path, sim) -> None:
    server = sim(*SIM)
    out = tmp_path / "regen.toml"
    result = regen("init", str(DATASETS / "llamafactory/mllm_demo.json"), "--endpoint", server.url, "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "none of its 6 rows can be sent, so no config was written" in result.stderr
    assert "in its 'images' column" in result.stderr and "text-only" in result.stderr
    assert not out.exists() and not result.stdout


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "regen.toml"
    out.write_text("# mine\n")
    result = regen("init", str(DATASETS / "fastchat_dummy_conversation.json"), "--out", str(out))
    assert result.returncode == 2 and "exists" in result.stderr and out.read_text() == "# mine\n"


def test_the_seed_config_marks_its_lines_to_check_as_init_does() -> None:
    text = (ROOT / "configs" / "qwen36-27b-mtp.toml").read_text()
    for key in ("path = ", "id_field = ", "messages_field = ", "keep_fields = ", "select = ", "dir = ", "model = ",
                "url = ", "api_key_env = "):  # fmt: skip
        lines = [x for x in text.splitlines() if x.startswith(key)]
        assert lines and all("# CHECK: " in x for x in lines), key
