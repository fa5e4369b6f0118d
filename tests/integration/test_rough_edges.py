"""Rough edges a first-time user hits (issue 17): what merge says, what the report calls an endpoint, and what an
OpenAI batch file asks for that a run does not do. The real CLI against a real simulator."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.conftest import regen
from tests.integration.test_run import SIM_FLAGS, write_config, write_prompts


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
