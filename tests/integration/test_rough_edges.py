"""Rough edges a first-time user hits (issue 17): what merge says, what the report calls an endpoint, and what an
OpenAI batch file asks for that a run does not do. The real CLI against a real simulator."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.helpers import SIM_FLAGS, write_config, write_prompts
from tests.helpers.processes import regen


def test_merge_says_nothing_to_merge_when_it_merged_nothing(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    write_prompts(tmp_path / "prompts.jsonl")
    assert regen("run", str(write_config(tmp_path, server.url)), "--no-progress").returncode == 0
    run_dir = str(tmp_path / "run")
    first = regen("merge", run_dir, "--target-rows", "1000")
    assert first.returncode == 0 and first.stdout.startswith("merged "), first.stdout
    again = regen("merge", run_dir, "--target-rows", "1000")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("nothing to merge") and "merged" not in again.stdout, again.stdout


def test_rows_that_never_reached_a_server_are_not_an_endpoint(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    write_prompts(tmp_path / "prompts.jsonl", bad=True)  # 3 bad_input rows: never sent, endpoint null
    assert regen("run", str(write_config(tmp_path, server.url)), "--no-progress").returncode == 0
    html = tmp_path / "report.html"
    result = regen("inspect", str(tmp_path / "run"), "--json", "--html", str(html))
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["rejected_by_reason"]["bad_input"] == 3
    assert list(report["per_endpoint"]) == [server.url]
    group = report["per_endpoint"][server.url]
    assert group["rows"] == 120 and group["reject_rate"] < 0.5  # the 3 bad rows are not its rejects either
    assert not [f for f in report["flagged"] if f["kind"] == "endpoint"]


def test_openai_batch_fields_that_are_not_honoured_are_listed_once(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    batch = tmp_path / "batch.jsonl"
    extras = [{"n": 4}, {"tools": [{"type": "function"}]}, {"response_format": {"type": "json_object"}}, {}]
    with open(batch, "wb") as fh:
        for i in range(12):
            body = {"model": "gpt-4o" if i < 3 else "Qwen3.6-27B", "messages": [{"role": "user", "content": f"q{i}"}]}
            body |= {"temperature": 0.1, **extras[i % 4]}
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            fh.write(orjson.dumps(line) + b"\n")
    cfg = tmp_path / "batch.toml"
    cfg.write_text(
        f'[input]\npath = "{batch}"\nformat = "openai-batch"\n[output]\ndir = "{tmp_path / "run"}"\n'
        f'[generation]\nmodel = "Qwen3.6-27B"\n[[endpoints]]\nurl = "{server.url}"\nconcurrency = 4\n'
    )
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "not honoured" in line]
    assert len(warnings) == 1, result.stderr
    (line,) = warnings
    for field, rows in (("n", 3), ("response_format", 3), ("model", 3), ("temperature", 12)):
        assert f"{field} ({rows} rows" in line, line
    ignored = line.split("ignored:")[1]
    assert "messages" not in ignored and "tools" not in ignored  # a body's tools are sent (issue 27)
    assert "input.request_overrides" in line and "generation.samples" in line
