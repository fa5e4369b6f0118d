"""Every export format of a real run (data/sample_conversations.jsonl through two simulators, one addressed by the
host name `localhost`), loaded the way its consumer loads it, and no byte of any exported file naming an endpoint:
the URLs, their host:port, their hosts, the ports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import datasets
import duckdb
import orjson
import pytest

from tests.helpers.paths import ROOT, SPECFORGE
from tests.helpers.processes import SimProcess, regen

SIM = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "60")


def _run(tmp_path: Path, urls: list[str]) -> Path:
    endpoints = "".join(f'[[endpoints]]\nurl = "{url}"\nconcurrency = 4\n' for url in urls)
    cfg = tmp_path / "conv.toml"
    cfg.write_text(
        f"""
[input]
path = "{ROOT / "data" / "sample_conversations.jsonl"}"
keep_fields = ["source"]
[output]
dir = "{tmp_path / "run"}"
[generation]
model = "Qwen3.6-27B"
max_tokens = 2048
[expect]
reasoning_parser = "qwen3"
{endpoints}"""
    )
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    return tmp_path / "run"


def _leaks(folder: Path, urls: list[str]) -> list[str]:
    needles = set()
    for url in urls:
        hostport = url.split("://", 1)[1]
        needles |= {url, hostport, hostport.split(":")[0], f":{hostport.split(':')[1]}"}
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(folder)}: {n}" for n in sorted(needles) if n.encode() in data]
    return found


@pytest.mark.timeout(300)
def test_every_format_of_a_real_run_loads_and_names_no_endpoint(
    tmp_path: Path,
    sim,
    tokenizer_dir: Path,
) -> None:
    servers: list[SimProcess] = [sim(*SIM), sim(*SIM)]
    urls = [servers[0].url, servers[1].url.replace("127.0.0.1", "localhost")]
    run_dir = _run(tmp_path, urls)
    cache = str(tmp_path / "hf-cache")
    exports = {
        "chat": ["--format", "chat", "--include-rejects"],
        "sharegpt": ["--format", "sharegpt", "--reasoning", "field"],
        "specforge": ["--format", "specforge"],
        "specforge-turns": ["--format", "specforge", "--expand-turns"],
        "trl": ["--format", "prompt-completion", "--expand-turns", "--file-format", "jsonl"],
        "tokenized": ["--format", "tokenized", "--tokenizer", str(tokenizer_dir), "--expand-turns"],
        "batch": ["--format", "openai-batch-output", "--include-rejects"],
    }
    for name, flags in exports.items():
        out = tmp_path / "exports" / name
        done = regen("export", str(run_dir), "--out", str(out), "--license", "apache-2.0", "--language", "en", *flags)
        assert done.returncode == 0, (name, done.stderr)
    exported = tmp_path / "exports"
    assert _leaks(exported, urls) == []

    def count(kind: str) -> int:
        files = sorted((run_dir / kind).glob("*.parquet"))
        return int(duckdb.sql(f"select count(*) from read_parquet({[str(f) for f in files]})").fetchall()[0][0])

    accepted, rejected = count("shards"), count("rejects") if list((run_dir / "rejects").glob("*.parquet")) else 0
    assert accepted >= 58  # data/sample_conversations.jsonl: 60 usable conversations, 2 bad rows
    chat = datasets.load_dataset(str(exported / "chat"), split="train", cache_dir=cache)
    assert len(chat) == accepted
    multi = next(r for r in chat if sum(m["role"] == "assistant" for m in r["messages"]) > 2)
    assert all(m["reasoning_content"] for m in multi["messages"] if m["role"] == "assistant")
    if rejected:
        rejects = datasets.load_dataset(str(exported / "chat"), "rejects", split="train", cache_dir=cache)
        assert len(rejects) == rejected and all(rejects["reason"])

    for name in ("specforge", "specforge-turns"):
        data = next((exported / name / "data").glob("train-*.jsonl"))
        flags = ["--expect-reasoning"] if name == "specforge" else []
        script = SPECFORGE / "validate_regenerated_data.py"
        done = subprocess.run(
            [sys.executable, str(script), "--data-path", str(data), *flags, "--strict-think-markers"],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr

    turns = sum(sum(m["role"] == "assistant" for m in r["messages"]) for r in chat)
    trl = datasets.load_dataset(str(exported / "trl"), split="train", cache_dir=cache)
    assert len(trl) == turns and all(r["completion"][0]["reasoning_content"] for r in trl)
    assert all(r["prompt"][-1]["role"] == "user" for r in trl)

    tokenized = duckdb.sql(
        f"select count(*), min(num_loss_tokens), sum(len(input_ids) = num_tokens)::int "
        f"from read_parquet('{exported / 'tokenized' / 'data'}/train-*.parquet')"
    ).fetchall()[0]
    assert tokenized == (turns, tokenized[1], turns) and tokenized[1] > 0

    lines = [
        orjson.loads(x) for f in (exported / "batch" / "data").glob("*.jsonl") for x in f.read_bytes().splitlines()
    ]
    assert len(lines) == accepted + rejected
