"""An OpenAI batch file (the format of vLLM's run-batch and hosted batch APIs) run end to end, then exported."""

from __future__ import annotations

from pathlib import Path

import datasets
import orjson

from tests.conftest import ROOT, read_rows, regen
from tests.integration.test_run import SIM_FLAGS

BATCH = ROOT / "data" / "sample_batch.jsonl"


def test_openai_batch_in_and_out(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS, "--mean-output-tokens", "900")  # long enough that some need more than 1000 tokens
    requests = [orjson.loads(line) for line in BATCH.read_bytes().splitlines() if line.strip()]
    cfg = tmp_path / "batch.toml"
    cfg.write_text(
        f'[input]\npath = "{BATCH}"\nformat = "openai-batch"\nrequest_overrides = true\n'
        f'[output]\ndir = "{tmp_path / "run"}"\n'
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 4096\n'
        f'[[endpoints]]\nurl = "{server.url}"\nconcurrency = 8\n'
    )
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 0, result.stderr
    rows = read_rows(tmp_path / "run", "shards") + read_rows(tmp_path / "run", "rejects")
    assert sorted(r["id"] for r in rows) == sorted(q["custom_id"] for q in requests)
    by_id = {r["id"]: r for r in rows}
    for q in requests:  # body.messages became the prompt; the per-request max_completion_tokens was honoured
        assert by_id[q["custom_id"]]["messages"] == q["body"]["messages"]
        assert by_id[q["custom_id"]]["completion_tokens"] <= q["body"]["max_completion_tokens"] == 1000
    # [generation] allows 4096: only the batch's cap truncated the long ones, which were then retried
    assert any(r["attempts"] > 1 for r in rows)

    out = tmp_path / "export"
    exported = regen("export", str(tmp_path / "run"), "--format", "openai-batch-output", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = [orjson.loads(line) for f in sorted((out / "data").glob("*.jsonl")) for line in f.read_bytes().splitlines()]
    accepted = {r["id"] for r in read_rows(tmp_path / "run", "shards")}
    assert {line["custom_id"] for line in lines} == accepted
    for line in lines:
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200 and line["error"] is None
        assert body["choices"][0]["message"]["content"] == by_id[line["custom_id"]]["answer"]
        assert body["choices"][0]["message"]["reasoning_content"] == by_id[line["custom_id"]]["reasoning"]
    ds = datasets.load_dataset("json", data_files=str(out / "data" / "*.jsonl"), split="train")
    assert ds.num_rows == len(accepted)
