"""End to end in a bucket: the real CLI against the simulator, reading and writing s3:// on a local S3 server."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_config, write_prompts
from tests.helpers.bucket_runs import RUN, bucket_run_config, final_view
from tests.helpers.exactly_once import committed_ids
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen
from tests.objectstore import ACCESS_KEY, BUCKET, SECRET_KEY, S3Server, serve_s3


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    yield from serve_s3(tmp_path, monkeypatch)


def test_a_run_in_a_bucket_finishes_and_every_reader_works_on_its_uri(tmp_path: Path, sim, s3: S3Server) -> None:
    server = sim(*SIM_FLAGS)
    cfg, ids = bucket_run_config(tmp_path, s3, server.url, n=120)
    outputs = [regen("run", str(cfg), "--no-progress")]
    assert outputs[0].returncode == 0, outputs[0].stderr
    assert_exactly_once(final_view(tmp_path), ids, exact=True)
    outputs.append(status := regen("status", RUN, "--json"))
    assert status.returncode == 0, status.stderr
    outputs.append(exported := regen("export", RUN, "--format", "chat", "--out", str(tmp_path / "export")))
    assert exported.returncode == 0, exported.stderr
    outputs.append(merged := regen("merge", RUN, "--target-rows", "1000"))
    assert merged.returncode == 0, merged.stderr
    outputs.append(regen("inspect", RUN))
    outputs.append(regen("validate", RUN))
    assert all(o.returncode == 0 for o in outputs[-2:]), outputs[-1].stderr
    after_merge = final_view(tmp_path, "after-merge")
    assert_exactly_once(after_merge, ids, exact=True)
    assert len(list((after_merge / "shards").glob("*.parquet"))) == 1
    # no credential anywhere: outputs, the bucket's objects, every local file the run or the readers wrote
    texts = [o.stdout + o.stderr for o in outputs]
    texts += [s3.client().get_object(Bucket=BUCKET, Key=k)["Body"].read().decode("latin-1") for k in s3.keys()]
    texts += [p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file()]
    for secret in (SECRET_KEY, ACCESS_KEY):
        assert not [t for t in texts if secret in t]
    assert f"runs/e2e/{'run.json'}" in s3.keys()


def test_a_missing_bucket_is_exit_2_naming_the_uri(tmp_path: Path, s3: S3Server) -> None:
    write_prompts(tmp_path / "prompts.jsonl", n=5)
    cfg = write_config(tmp_path, "http://127.0.0.1:9")
    result = regen("run", str(cfg), "--no-progress", "--output", "s3://no-such-bucket/runs/x")
    assert result.returncode == 2
    assert "s3://no-such-bucket/runs/x" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (ROOT / "s3:").exists()
    missing = regen("status", "s3://no-such-bucket/runs/x")
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def _start(cfg: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for_commit(s3: S3Server, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any("/_regen/log/" in k for k in s3.keys("runs/e2e/")):
            return
        time.sleep(0.1)
    raise AssertionError("no commit record appeared")


def test_sigkill_mid_run_then_resume_is_exactly_once(tmp_path: Path, sim, s3: S3Server) -> None:
    server = sim(*SIM_FLAGS, "--decode-rate", "3000", "--max-running-requests", "16")
    cfg, ids = bucket_run_config(tmp_path, s3, server.url, n=300)
    proc = _start(cfg)
    _wait_for_commit(s3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    partial = final_view(tmp_path, "partial")
    assert 0 < len(committed_ids(partial, "shards") + committed_ids(partial, "rejects")) < 300
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert_exactly_once(final_view(tmp_path), ids, exact=True)


def test_a_second_process_on_the_same_worker_exits_4(tmp_path: Path, sim, s3: S3Server) -> None:
    server = sim(*SIM_FLAGS, "--decode-rate", "1000", "--max-running-requests", "4")
    cfg, _ = bucket_run_config(tmp_path, s3, server.url, n=400)
    first = _start(cfg)
    try:
        _wait_for_commit(s3, first)
        same_node = regen("run", str(cfg), "--no-progress")
        other_node = regen("run", str(cfg), "--no-progress", env={"XDG_CACHE_HOME": str(tmp_path / "node-b")})
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert same_node.returncode == 4, same_node.stderr
    assert other_node.returncode == 4, other_node.stderr
    assert "lease is held by pid" in other_node.stderr
