"""End to end: the real CLI against a real simulator over HTTP on 127.0.0.1, real Parquet files."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from tests.helpers import PROMPTS, SIM_FLAGS, assert_exactly_once, write_config, write_prompts
from tests.helpers.exactly_once import committed_ids, read_rows
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen


def test_faulty_completions_never_reach_shards(tmp_path: Path, sim) -> None:
    server = sim(
        *SIM_FLAGS, "--fail-empty", "0.15", "--fail-answer-in-reasoning", "0.15", "--fail-503", "0.1", "--seed", "3"
    )
    ids = write_prompts(tmp_path / "prompts.jsonl", bad=True)
    cfg = write_config(tmp_path, server.url)
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    good, bad = assert_exactly_once(run_dir, ids + ["bad-empty", "bad-role"])
    rows = read_rows(run_dir, "shards")
    assert rows and all(r["answer"].strip() and r["reasoning"].strip() and r["finish_reason"] == "stop" for r in rows)
    assert all("</think>" not in r["answer"] for r in rows)
    assert {r["topic"] for r in rows} <= {"math", "code", "x"}
    rejects = read_rows(run_dir, "rejects")
    reasons = Counter(r["reason"] for r in rejects)
    assert reasons["bad_input"] == 3  # empty prompt, message without role, invalid JSON line
    detail = {r["id"]: r["detail"] for r in rejects}
    assert "prompts.jsonl:" in detail["bad-empty"]
    # retries happened (empty / in-reasoning completions are retried with a new seed), and most prompts made it
    assert len(good) >= PROMPTS * 0.9
    assert "accepted" in result.stderr and "rejected" in result.stderr
    manifest = orjson.loads((run_dir / "run.json").read_bytes())
    assert manifest["config_hash"] and manifest["config"]["generation"]["model"] == "Qwen3.6-27B"


def test_rerun_after_completion_sends_no_generation(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=60)
    cfg = write_config(tmp_path, server.url)
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    before = server.stats()
    again = regen("run", str(cfg), "--no-progress")
    assert again.returncode == 0, again.stderr
    after = server.stats()
    assert after["generations_total"] == before["generations_total"]
    assert_exactly_once(tmp_path / "run", ids)


def test_truncated_thinking_is_rejected(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=20)
    cfg = write_config(tmp_path, server.url, max_tokens=40)
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    good, bad = assert_exactly_once(tmp_path / "run", ids)
    assert good == []
    assert {r["reason"] for r in read_rows(tmp_path / "run", "rejects")} == {"truncated"}
    assert all(r["attempts"] == 4 for r in read_rows(tmp_path / "run", "rejects"))


def test_parser_off_server_still_splits(tmp_path: Path, sim) -> None:
    server = sim("--served-model-name", "Qwen3.6-27B", "--mean-output-tokens", "200")  # no --reasoning-parser
    ids = write_prompts(tmp_path / "prompts.jsonl", n=30)
    cfg = write_config(tmp_path, server.url)
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    good, _ = assert_exactly_once(tmp_path / "run", ids)
    rows = read_rows(tmp_path / "run", "shards")
    assert len(rows) == 30
    assert all(r["reasoning"] and r["answer"] and "</think>" not in r["answer"] + r["reasoning"] for r in rows)


def test_sigint_then_rerun_finishes_without_duplicates(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS, "--decode-rate", "3000", "--max-running-requests", "16")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=200)
    cfg = write_config(tmp_path, server.url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.stats()["generations_total"] < 20:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "resume with: regen run" in err
    partial = committed_ids(tmp_path / "run", "shards") + committed_ids(tmp_path / "run", "rejects")
    assert 0 < len(partial) < 200
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert_exactly_once(tmp_path / "run", ids)


def _start_and_wait(
    tmp_path: Path, server, n: int = 200, *sets: str, key: str = "generations_total"
) -> subprocess.Popen[str]:
    write_prompts(tmp_path / "prompts.jsonl", n=n)
    cfg = write_config(tmp_path, server.url)
    argv = [
        sys.executable,
        "-m",
        "pipeline",
        "run",
        str(cfg),
        "--no-progress",
        *(a for x in sets for a in ("--set", x)),
    ]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.stats()[key] < (20 if key == "generations_total" else 8):
        assert proc.poll() is None
        time.sleep(0.05)
    return proc


def test_ctrl_c_says_what_it_drains_and_prints_the_counts(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS, "--decode-rate", "3000", "--max-running-requests", "16")
    proc = _start_and_wait(tmp_path, server)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "SIGINT: finishing " in err and "requests in flight for at most 30s" in err
    assert "Ctrl-C again to stop now" in err
    assert "prompts finished in" in err and "pending)" in err  # the counts, then how to resume
    assert err.index("prompts finished in") < err.index("resume with: regen run")


def test_a_second_ctrl_c_stops_now_and_loses_nothing(tmp_path: Path, sim) -> None:
    """Requests that take far longer than the drain a user will wait for: the second Ctrl-C cancels them, and they
    stay pending for the rerun (exactly once)."""
    server = sim(*SIM_FLAGS, "--decode-rate", "300", "--max-running-requests", "16")
    proc = _start_and_wait(tmp_path, server, 60, "client.drain_timeout_s=600", key="in_flight")
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    for line in proc.stderr:  # synchronise on the run's own word that it drains
        if "requests in flight for at most 600s" in line:
            break
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 30  # not the 600 s drain
    assert "stopping now:" in err and "their prompts stay pending" in err
    fast = sim(*SIM_FLAGS)  # the rerun need not wait on the slow server
    result = regen("run", str(tmp_path / "run.toml"), "--no-progress", "--endpoint", fast.url, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_exactly_once(tmp_path / "run", [f"p{i:04d}" for i in range(60)])


def test_sighup_drains_like_ctrl_c(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS, "--decode-rate", "3000", "--max-running-requests", "16")
    proc = _start_and_wait(tmp_path, server)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "SIGHUP: finishing " in err and "resume with: regen run" in err


def test_misspelled_key_fails_and_writes_nothing(tmp_path: Path) -> None:
    write_prompts(tmp_path / "prompts.jsonl", n=5)
    cfg = write_config(tmp_path, "sim", extra="concurency = 3")
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 2
    assert "unknown key 'endpoints[0].concurency'; did you mean 'endpoints[0].concurrency'?" in result.stderr
    assert not (tmp_path / "run").exists()


def test_unauthorized_endpoint_fails_fast(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS, "--api-key", "sekrit")
    write_prompts(tmp_path / "prompts.jsonl", n=20)
    cfg = write_config(tmp_path, server.url)
    start = time.monotonic()
    result = regen("run", str(cfg), "--no-progress", "--skip-preflight")
    assert result.returncode == 3, result.stderr
    assert "HTTP 401" in result.stderr and "api_key_env" in result.stderr
    assert time.monotonic() - start < 30
    cfg.write_text(cfg.read_text().replace("concurrency = 16", 'concurrency = 16\napi_key_env = "SIM_KEY"'))
    ok = regen("run", str(cfg), "--no-progress", "--skip-preflight", env={"SIM_KEY": "sekrit"})
    assert ok.returncode == 0, ok.stderr


def test_shards_load_with_datasets_and_duckdb(tmp_path: Path, sim) -> None:
    import datasets
    import duckdb

    server = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=40)
    cfg = write_config(tmp_path, server.url)
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    pattern = str(tmp_path / "run" / "shards" / "*.parquet")
    ds = datasets.load_dataset("parquet", data_files=pattern, split="train")
    assert sorted(ds["id"]) == sorted(ids)
    assert set(ds.column_names) >= {"id", "messages", "reasoning", "answer", "finish_reason", "created_at", "topic"}
    rows = duckdb.sql(f"select count(distinct id), count(*) from read_parquet('{pattern}')").fetchall()
    assert rows == [(40, 40)]
    schema = pq.read_schema(next((tmp_path / "run" / "shards").glob("*.parquet")))
    assert schema.metadata[b"regen_schema_version"] == b"3"  # 2: turns and source_id; 3: acceptance, repetition


def test_an_empty_input_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "prompts.jsonl").write_bytes(b"")
    cfg = write_config(tmp_path, "sim")
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 2, result.stderr
    assert "prompts.jsonl: the input holds no row: nothing to generate" in result.stderr
    assert not (tmp_path / "run").exists()
