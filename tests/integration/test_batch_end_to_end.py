"""An OpenAI batch file (the format of vLLM's run-batch and hosted batch APIs) run end to end, then exported."""

from __future__ import annotations

from pathlib import Path

import datasets
import orjson

from pipeline.inputs.batch_lines import BATCH_URL
from tests.helpers import SIM_FLAGS
from tests.helpers.exactly_once import committed_ids, read_rows
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen

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


def test_n_runs_as_samples_resumes_and_exports_as_choices(tmp_path: Path, sim) -> None:
    """`body.n` with request_overrides: one row per sample, each its own seed; a rerun sends nothing; --only-ids
    takes every sample of a listed request; the export puts a request's samples back into one line."""
    server = sim(*SIM_FLAGS)
    ns = {"r0": 3, "r1": None, "r2": 1, "r3": 2, "r4": 4}
    batch = tmp_path / "batch.jsonl"
    with open(batch, "wb") as fh:
        for custom_id, n in [*ns.items(), ("bad", 2)]:
            body: dict = {"messages": [{"role": "user", "content": f"question {custom_id}"}], "seed": 11}
            if n is not None:
                body["n"] = n
            if custom_id == "bad":
                body = {"n": n}  # no messages: bad_input, once per sample
            fh.write(orjson.dumps({"custom_id": custom_id, "method": "POST", "url": BATCH_URL, "body": body}) + b"\n")

    def config(run: str) -> Path:
        cfg = tmp_path / f"{run}.toml"
        cfg.write_text(
            f'[input]\npath = "{batch}"\nformat = "openai-batch"\nrequest_overrides = true\n'
            f'[output]\ndir = "{tmp_path / run}"\n'
            '[generation]\nmodel = "Qwen3.6-27B"\nsamples = 2\n'  # r1 has no n: generation.samples gives it 2
            f'[[endpoints]]\nurl = "{server.url}"\nconcurrency = 4\n'
        )
        return cfg

    result = regen("run", str(config("run")), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "not honoured" not in result.stderr
    run = tmp_path / "run"
    want = ["r0#0", "r0#1", "r0#2", "r1#0", "r1#1", "r2", "r3#0", "r3#1", "r4#0", "r4#1", "r4#2", "r4#3"]
    accepted = read_rows(run, "shards")
    assert sorted(r["id"] for r in accepted) == want
    assert sorted(r["id"] for r in read_rows(run, "rejects")) == ["bad#0", "bad#1"]
    for r in accepted:
        assert r["source_id"] == (None if r["id"] == "r2" else r["id"].split("#")[0])
    for source in ("r0", "r1", "r3", "r4"):  # the body's seed is the base; each sample's request seed differs
        seeds = [r["seed"] for r in accepted if r["source_id"] == source]
        assert len(set(seeds)) == len(seeds) > 1
    sent = server.stats()["generations_total"]
    assert sent >= len(want)

    again = regen("run", str(config("run")), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert server.stats()["generations_total"] == sent  # every sample was done: nothing is sent again
    assert sorted(committed_ids(run, "shards")) == want

    only = tmp_path / "only.txt"
    only.write_text("r3\nr0\n")
    picked = regen("run", str(config("picked")), "--no-progress", "--only-ids", str(only))
    assert picked.returncode == 0, picked.stderr
    assert sorted(committed_ids(tmp_path / "picked", "shards")) == ["r0#0", "r0#1", "r0#2", "r3#0", "r3#1"]

    out = tmp_path / "export"
    exported = regen("export", str(run), "--format", "openai-batch-output", "--include-rejects", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = {
        f.name.split("-")[0]: [orjson.loads(line) for line in f.read_bytes().splitlines()]
        for f in sorted((out / "data").glob("*.jsonl"))
    }
    by_custom = {line["custom_id"]: line for line in lines["train"]}
    assert sorted(by_custom) == ["r0", "r1", "r2", "r3", "r4"]
    answers = {r["id"]: r["answer"] for r in accepted}
    for custom_id, n in ns.items():
        choices = by_custom[custom_id]["response"]["body"]["choices"]
        k = n or 2
        assert [c["index"] for c in choices] == list(range(k))
        ids = [custom_id] if k == 1 else [f"{custom_id}#{j}" for j in range(k)]
        assert [c["message"]["content"] for c in choices] == [answers[i] for i in ids]
    # a bad row's samples carry its source_id like any sample: one line with both reasons
    assert [line["custom_id"] for line in lines["rejects"]] == ["bad"]
    assert lines["rejects"][0]["error"]["code"] == "bad_input"
    assert lines["rejects"][0]["error"]["message"].startswith("#0 bad_input: ")
    assert "; #1 bad_input: " in lines["rejects"][0]["error"]["message"]
