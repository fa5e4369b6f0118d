"""Tool conversations end to end (issue 27), on LLaMA-Factory's real files read where they are
(../shared/datasets/llamafactory, never copied): audit, run with the repair selection (`input.select = "invalid"`:
every row fails the audit in thinking mode, for want of reasoning) against the simulator over real HTTP (with a
tool-call parser), every export loaded with `datasets`, the repaired files in their own shape, the resample of a
text turn that calls a tool, preflight's tool-call-parser warning, and a SIGKILL in the middle of a tool run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import datasets
import orjson
import pyarrow.parquet as pq
import pytest

from pipeline import conversation
from pipeline.config import InputConfig
from pipeline.inputs.reader import PromptReader
from pipeline.records import Prompt
from pipeline.sim import prompt_key
from tests.helpers import assert_exactly_once
from tests.helpers.paths import ROOT, SHARED, needs_shared
from tests.helpers.processes import SimProcess, regen
from tests.helpers.tokenizer import masked_runs

LLAMAFACTORY = SHARED / "datasets" / "llamafactory"
pytestmark = needs_shared("datasets")
GLAIVE = LLAMAFACTORY / "glaive_toolcall_en_demo.json"
V1_SFT = LLAMAFACTORY / "v1_sft_demo.jsonl"
MLLM = LLAMAFACTORY / "mllm_demo.json"
REASON_TOOLS = LLAMAFACTORY / "reason_tool_use_demo_50.jsonl"
SIM = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen25")


def _config(tmp_path: Path, url: str, data: Path, extra: str = "", select: str = "invalid") -> Path:
    cfg = tmp_path / "tools.toml"
    cfg.write_text(
        f"""
[input]
path = "{data}"
dedupe = true
select = "{select}"
[output]
dir = "{tmp_path / "run"}"
shard_rows = 50
sync_interval_s = 0.1
[generation]
model = "Qwen3.6-27B"
max_tokens = 4096
{extra}
[client]
backoff_base_s = 0.01
[[endpoints]]
url = "{url}"
concurrency = 16
"""
    )
    return cfg


def _prompts(data: Path) -> dict[str, Prompt]:
    reader = PromptReader(InputConfig(path=str(data), dedupe=True, select="invalid"))
    return {p.id: p for batch in reader.iter_batches() for p in batch if isinstance(p, Prompt)}


def _rows(run_dir: Path, sub: str = "shards") -> dict[str, dict[str, Any]]:
    parts = sorted((run_dir / sub).glob("*.parquet"))
    return {r["id"]: r for p in parts for r in pq.read_table(p).to_pylist()}


def _requests(prompt: Prompt, row: dict[str, Any]) -> list[list[dict[str, Any]]]:
    answers = [t["answer"] for t in row["turns"]]
    return [conversation.request(prompt.messages, prompt.positions, k, answers) for k in range(len(prompt.positions))]


def test_glaive_runs_with_its_tools_and_exports_in_every_shape(tmp_path: Path, sim, tokenizer_dir: Path) -> None:
    audit = regen("audit", str(GLAIVE), "--json")
    assert audit.returncode in (0, 1), audit.stderr
    assert "bad_input" not in orjson.loads(audit.stdout)["by_reason"]  # 0 tool rows unreadable
    server: SimProcess = sim(*SIM, "--mean-output-tokens", "60")
    done = regen("run", str(_config(tmp_path, server.url, GLAIVE)), "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "run"
    prompts, rows = _prompts(GLAIVE), _rows(run_dir)
    assert set(rows) == set(prompts) and len(rows) == 265 and not _rows(run_dir, "rejects")
    stats = server.stats()
    sent_with_tools = 0
    for prompt_id, prompt in prompts.items():
        row = rows[prompt_id]
        for request in _requests(prompt, row):
            key = prompt_key(request)
            # tools with every request of a row that has them, and never with one that has none
            sent = stats["generations"][key] if prompt.tools else 0  # every request generated once (no faults)
            assert stats["with_tools"].get(key, 0) == sent, prompt_id
            sent_with_tools += bool(prompt.tools)
        assert json.loads(row["tools"] or "[]") == list(prompt.tools)
    assert sent_with_tools > 300
    _repaired_glaive(run_dir, tmp_path / "repaired")
    _every_export(run_dir, tmp_path, tokenizer_dir)


def _repaired_glaive(run_dir: Path, out: Path) -> None:
    done = regen("export", str(run_dir), "--format", "repaired", "--original", str(GLAIVE), "--out", str(out))
    assert done.returncode == 0, done.stderr
    original = json.loads(GLAIVE.read_bytes())
    repaired = json.loads((out / GLAIVE.name).read_bytes())
    assert len(repaired) == len(original) == 300
    changed = 0
    for before, after in zip(original, repaired, strict=True):
        assert after["tools"] == before["tools"]
        for old, new in zip(before["conversations"], after["conversations"], strict=True):
            assert new["from"] == old["from"]
            if old["from"] in ("function_call", "observation", "human"):
                assert new == old  # kept byte for byte: calls, results and questions
            else:
                changed += new["value"] != old["value"]
    assert changed > 500  # the text answers are new


def _every_export(run_dir: Path, tmp_path: Path, tokenizer: Path) -> None:
    for fmt in ("chat", "sharegpt", "prompt-completion", "specforge"):
        out = tmp_path / f"export-{fmt}"
        done = regen("export", str(run_dir), "--format", fmt, "--out", str(out))
        assert done.returncode == 0, (fmt, done.stderr)
        files = sorted(str(p) for p in (out / "data").glob("train-*"))
        loaded = datasets.load_dataset("json" if files[0].endswith(".jsonl") else "parquet", data_files=files)["train"]
        assert len(loaded) == 265, fmt
        first = next(r for r in loaded if _calls_a_tool(fmt, r))
        assert json.loads(first["tools"] or "null")[0]["type"] == "function", (fmt, first)
        if fmt == "chat":
            calls = [m for m in first["messages"] if m["tool_calls"]]
            assert calls and calls[0]["tool_calls"][0]["function"]["name"]
            assert first["regenerated"] == [m["role"] == "assistant" and not m["tool_calls"] for m in first["messages"]]
        if fmt == "sharegpt":
            assert {"function_call", "observation"} <= {m["from"] for m in first["conversations"]}
    from pipeline.dataset.export import ExportOptions
    from pipeline.dataset.exporters import export

    summary = export(run_dir, "tokenized", tmp_path / "export-tokenized", ExportOptions(tokenizer=tokenizer))
    rows = _rows(run_dir)
    table = pq.read_table(sorted((tmp_path / "export-tokenized" / "data").glob("*.parquet"))).to_pylist()
    assert summary["rows"] == len(table) == 265
    for got in table:
        # the loss mask covers only the turns regen generated: one masked run per generated turn
        assert len(masked_runs(got["input_ids"], got["loss_mask"])) == len(rows[got["id"]]["turns"]), got["id"]


def _calls_a_tool(fmt: str, row: dict[str, Any]) -> bool:
    """Whether an exported row holds a kept tool call, in the shape of its format."""
    if fmt == "sharegpt":
        return any(m["from"] == "function_call" for m in row["conversations"])
    messages = {"chat": "messages", "prompt-completion": "prompt", "specforge": "conversations"}[fmt]
    return any(m.get("tool_calls") for m in row[messages])


def test_v1_sft_demo_runs_whole_and_is_repaired_in_its_own_part_shape(tmp_path: Path, sim) -> None:
    server = sim(*SIM, "--mean-output-tokens", "40")
    done = regen("run", str(_config(tmp_path, server.url, V1_SFT)), "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(_rows(tmp_path / "run")) == 499 and not _rows(tmp_path / "run", "rejects")  # 0 rows refused
    out = tmp_path / "repaired"
    done = regen("export", str(tmp_path / "run"), "--format", "repaired", "--original", str(V1_SFT), "--out", str(out))
    assert done.returncode == 0, done.stderr
    original = [json.loads(line) for line in V1_SFT.read_text().splitlines()]
    repaired = [json.loads(line) for line in (out / V1_SFT.name).read_text().splitlines()]
    assert len(repaired) == len(original) == 500
    new_answers = 0
    for before, after in zip(original, repaired, strict=True):
        user, assistant = after["messages"]
        assert user == before["messages"][0]
        assert assistant["loss_weight"] == 1.0 and assistant["role"] == "assistant"  # sibling keys kept
        kinds = [part["type"] for part in assistant["content"]]
        assert kinds in (["reasoning", "text"], ["text"]) and all("value" in p for p in assistant["content"])
        new_answers += assistant["content"][-1]["value"] != before["messages"][1]["content"][0]["value"]
    assert new_answers >= 499  # every row but the repeated id's second copy


def test_image_rows_are_refused_naming_the_images_and_audited(tmp_path: Path, sim) -> None:
    audit = regen("audit", str(MLLM), "--json")
    assert audit.returncode == 1
    report = orjson.loads(audit.stdout)
    assert report["by_reason"] == {"bad_input": 6}
    server = sim(*SIM)
    done = regen("run", str(_config(tmp_path, server.url, MLLM)), "--no-progress")
    assert done.returncode == 2  # every row refused: nothing sent, never exit 0
    assert "'images' column" in done.stderr and "text-only" in done.stderr
    assert server.stats()["requests"] == 0


def _marked(path: Path) -> list[str]:
    tools = [{"name": "get_weather", "parameters": {"type": "object"}}]
    rows = [
        {"id": "once", "tools": tools, "messages": [{"role": "user", "content": "Paris? [[sim:tool_call_once]]"}]},
        {"id": "always", "tools": tools, "messages": [{"role": "user", "content": "Rome? [[sim:tool_call]]"}]},
        {"id": "plain", "tools": tools, "messages": [{"role": "user", "content": "Oslo?"}]},
    ]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    return [r["id"] for r in rows]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_text_turn_that_calls_a_tool_is_resampled_then_rejected(tmp_path: Path, sim, stream: bool) -> None:
    server = sim(*SIM, "--mean-output-tokens", "40")
    data = tmp_path / "marked.jsonl"
    _marked(data)
    extra = "[client]\nmax_attempts = 3\nstream = true" if stream else "[client]\nmax_attempts = 3"
    cfg = _config(tmp_path, server.url, data).read_text().replace("[client]", extra, 1)
    (tmp_path / "tools.toml").write_text(cfg)
    done = regen("run", str(tmp_path / "tools.toml"), "--no-progress")
    assert done.returncode == 0, done.stderr
    accepted, rejected = _rows(tmp_path / "run"), _rows(tmp_path / "run", "rejects")
    assert accepted["once"]["attempts"] == 2 and accepted["once"]["finish_reason"] == "stop"  # resampled
    assert accepted["plain"]["attempts"] == 1
    assert rejected["always"]["reason"] == "tool_call" and rejected["always"]["attempts"] == 3
    assert "called get_weather instead of answering" in rejected["always"]["detail"]
    assert server.stats()["faults"]["tool_call"] == 4


def test_a_sigkill_mid_tool_run_then_a_rerun_stores_every_id_once_in_turn_order(tmp_path: Path, sim) -> None:
    server = sim(*SIM, "--mean-output-tokens", "60", "--decode-rate", "2000", "--max-running-requests", "8")
    cfg = _config(tmp_path, server.url, GLAIVE)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"], cwd=ROOT)
    try:
        while server.stats()["generations_total"] < 120:  # synchronise on the server: well into the run
            assert proc.poll() is None, "the run ended before the kill"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(_rows(tmp_path / "run")) < 265  # killed in the middle
    done = regen("run", str(cfg), "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr
    prompts = _prompts(GLAIVE)
    good, bad = assert_exactly_once(tmp_path / "run", list(prompts))
    assert len(good) == 265 and not bad
    for prompt_id, row in _rows(tmp_path / "run").items():
        prompt = prompts[prompt_id]
        assert len(row["turns"]) == len(prompt.positions)
        # turn order intact: the stored history is the input with turns 0..k-1 in place, calls and results kept
        assert row["messages"] == [{"role": m["role"], "content": m["content"]} for m in _requests(prompt, row)[-1]], (
            prompt_id
        )


def test_a_server_without_a_tool_call_parser_stops_the_run_before_any_prompt(tmp_path: Path, sim) -> None:
    data = tmp_path / "marked.jsonl"
    _marked(data)
    bare = sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "40")
    cfg = _config(tmp_path, bare.url, data)
    checked = regen("preflight", str(cfg), "--json")  # preflight reads the input's first rows as the run does
    assert checked.returncode == 1, checked.stderr
    [failing] = [c for c in json.loads(checked.stdout)["endpoints"][0]["checks"] if not c["ok"]]
    assert failing["key"] == "tool_call_parser" and "--tool-call-parser NAME" in failing["hint"]
    allowed = regen("preflight", str(cfg), "--set", "client.allow_no_tool_parser=true")
    assert allowed.returncode == 0 and "--tool-call-parser NAME" in allowed.stdout  # a warning then
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 3, done.stderr  # like drift: nothing sent
    assert "the input has tools but the server parses no tool calls" in done.stderr
    assert "--tool-call-parser NAME" in done.stderr and "client.allow_no_tool_parser" in done.stderr
    assert bare.stats()["with_tools"] == {}  # no generation request carried the rows' tools
    # opted out: each call comes back as text, and that text is never stored as an answer
    done = regen("run", str(cfg), "--no-progress", "--set", "client.allow_no_tool_parser=true")
    assert done.returncode == 0, done.stderr
    assert "the input has tools but the server parses no tool calls" in done.stderr  # still said
    accepted, rejected = _rows(tmp_path / "run"), _rows(tmp_path / "run", "rejects")
    assert set(accepted) == {"once", "plain"} and set(rejected) == {"always"}
    assert accepted["once"]["attempts"] == 2  # its first answer was a call in text: rejected, resampled
    assert rejected["always"]["reason"] == "tool_call" and "--tool-call-parser" in rejected["always"]["detail"]
    assert not any("<tool_call>" in (r["answer"] or "") for r in accepted.values())
    manifest = orjson.loads((tmp_path / "run" / "run.json").read_bytes())
    assert "tool_call_parser" in json.dumps(manifest["preflight"])
    with_parser = sim(*SIM, "--mean-output-tokens", "40")
    (tmp_path / "again").mkdir()
    quiet = regen("run", str(_config(tmp_path / "again", with_parser.url, data)), "--no-progress")
    assert quiet.returncode == 0 and "--tool-call-parser" not in quiet.stderr


def test_reason_tool_use_keeps_its_calls_and_regenerates_its_text_turns_as_parts(tmp_path: Path, sim) -> None:
    server = sim(*SIM, "--mean-output-tokens", "40")
    # every row: the audit's selection would be mostly the 11 rows that end in a call (nothing to generate there)
    done = regen("run", str(_config(tmp_path, server.url, REASON_TOOLS, select="all")), "--no-progress")
    assert done.returncode == 0, done.stderr
    accepted, rejected = _rows(tmp_path / "run"), _rows(tmp_path / "run", "rejects")
    assert len(accepted) == 39 and len(rejected) == 11
    assert all(r["reason"] == "bad_input" and "ends in a tool call" in r["detail"] for r in rejected.values())
    out = tmp_path / "repaired"
    done = regen("export", str(tmp_path / "run"), "--format", "repaired", "--original", str(REASON_TOOLS),
                 "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    original = [json.loads(line) for line in REASON_TOOLS.read_text().splitlines()]
    repaired = [json.loads(line) for line in (out / REASON_TOOLS.name).read_text().splitlines()]
    texts = 0
    for before, after in zip(original, repaired, strict=True):
        assert after["tools"] == before["tools"]
        for old, new in zip(before["messages"], after["messages"], strict=True):
            kinds = [part["type"] for part in old["content"]]
            if old["role"] != "assistant" or "tool_call" in kinds:
                assert new == old  # calls (with their reasoning), results, questions: as they were
            else:
                assert [part["type"] for part in new["content"]] in (["reasoning", "text"], ["text"])
                texts += new["content"][-1]["value"] != old["content"][-1]["value"]
    assert texts >= 39
