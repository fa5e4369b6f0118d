"""Issue 37: vLLM as an endpoint regen reads correctly, against a stand-in that answers as vLLM 0.32 does
(tests/helpers/fake_vllm.py; the real server runs in tests/real): the reasoning from `reasoning`, preflight naming
the server kind and what it cannot check, its probe not calling replies empty, the context length read from
/v1/models, the guard stopping a stream without /abort_request, an unknown model named, a prompt that does not fit
its own reject."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tests.helpers.exactly_once import committed_ids, read_rows
from tests.helpers.fake_vllm import MODEL, FakeVllm, serve
from tests.helpers.processes import regen

LOOP = "Wait, I should double-check the parity argument once more before answering, to be sure. "


def _config(tmp_path: Path, url: str, n: int, *, stream: bool = True, expect: str = "", model: str = MODEL) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": f"p{i}", "prompt": f"question {i}"}) + b"\n" for i in range(n)))
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[input]
path = "{prompts}"
[output]
dir = "{tmp_path / "run"}"
sync_interval_s = 0.2
[generation]
model = "{model}"
max_tokens = 2048
[client]
stream = {"true" if stream else "false"}
max_attempts = 2
backoff_base_s = 0.01
backoff_max_s = 0.05
[[endpoints]]
url = "{url}"
concurrency = 4
{expect}
"""
    )
    return cfg


def test_preflight_names_vllm_and_what_it_cannot_check(tmp_path: Path) -> None:
    fake = FakeVllm(
        replies={"What is 17 + 25? Think briefly, then answer with the number.": ("17 + 25 = 42.", "42", "stop")}
    )
    with serve(fake) as url:
        result = regen("preflight", str(_config(tmp_path, url, 1)), "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        [endpoint] = json.loads(result.stdout)["endpoints"]
        checks = {c["name"]: c for c in endpoint["checks"]}
        assert endpoint["info"]["kind"] == "vllm" and checks["server"]["actual"] == "vllm 0.32.0"
        assert "[expect] (vLLM reports no server arguments)" in checks["server"]["hint"]
        assert checks["context length"]["actual"] == 4096 and checks["context length"]["ok"]
        assert checks["thinking"]["ok"] and "empty" not in checks["thinking"]["actual"]  # the probe read `reasoning`
        strict = regen("preflight", str(_config(tmp_path, url, 1, expect='[expect]\nreasoning_parser = "qwen3"')))
        assert (
            strict.returncode == 1 and "vLLM reports no server arguments: [expect] cannot be checked" in strict.stdout
        )


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_a_run_stores_vllms_reasoning(tmp_path: Path, stream: bool) -> None:
    fake = FakeVllm(
        replies={f"question {i}": (f"Reasoning {i}: it is {i * i}.", f"{i * i}", "stop") for i in range(30)}
    )
    with serve(fake) as url:
        result = regen("run", str(_config(tmp_path, url, 30, stream=stream)), "--no-progress")
        assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in read_rows(tmp_path / "run", "shards")}
    assert len(rows) == 30
    for i in range(30):
        row = rows[f"p{i}"]
        assert (row["reasoning"], row["answer"], row["finish_reason"]) == (
            f"Reasoning {i}: it is {i * i}.",
            f"{i * i}",
            "stop",
        )
    assert all("rid" in body for body in fake.bodies)


def test_the_guard_stops_a_vllm_stream_by_closing_it(tmp_path: Path) -> None:
    """vLLM has no /abort_request: closing the stream is what aborts a request there."""
    fake = FakeVllm(replies={"question 0": ("Let me see. " + LOOP * 2000, "", "length")}, chunk=16, delay_s=0.0005)
    with serve(fake) as url:
        result = regen("run", str(_config(tmp_path, url, 1)), "--no-progress")
        assert result.returncode == 0, result.stderr
        assert fake.closed == 2  # both attempts stopped by closing the stream ...
    full = len("Let me see. " + LOOP * 2000)  # ... at once: ~8,000 repeated characters, not the whole reply
    assert all(sent < 0.2 * full for sent in fake.sent_before_close), (fake.sent_before_close, full)
    [row] = read_rows(tmp_path / "run", "rejects")
    assert row["reason"] == "looping" and row["detail"].startswith("stopped as it streamed: reasoning loops")


def test_an_unknown_model_is_named(tmp_path: Path) -> None:
    with serve(FakeVllm()) as url:
        result = regen("run", str(_config(tmp_path, url, 3, model="Qwen3.6-27B")), "--no-progress", "--skip-preflight")
    assert result.returncode == 3
    assert "The model `Qwen3.6-27B` does not exist." in result.stderr and "generation.model" in result.stderr


def test_a_prompt_that_does_not_fit_is_rejected_once(tmp_path: Path) -> None:
    fake = FakeVllm()
    with serve(fake) as url:
        cfg = _config(tmp_path, url, 5, stream=False)
        long = {"id": "long", "prompt": "word " * 12000}
        with (tmp_path / "prompts.jsonl").open("ab") as f:
            f.write(orjson.dumps(long) + b"\n")
        result = regen("run", str(cfg), "--no-progress")
        assert result.returncode == 0, result.stderr
    [row] = read_rows(tmp_path / "run", "rejects")
    assert (row["id"], row["reason"], row["attempts"]) == ("long", "context_length", 1)
    assert "maximum context length is 4096 tokens" in row["detail"]
    assert sorted(committed_ids(tmp_path / "run", "shards")) == [f"p{i}" for i in range(5)]
    assert sum(1 for b in fake.bodies if b["messages"][-1]["content"].startswith("word")) == 1  # never retried
