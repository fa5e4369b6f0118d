"""A bucket that fails under a run (issue 29): a 12-second outage the run rides out, a lease taken away (exit 4), a
commit log that lost records (exit 3, for the worker and for every reader), an object regen did not write left
alone. The real CLI against the simulator and a local S3 server (moto), through a TCP proxy that drops connections."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from botocore.config import Config as BotoConfig

from pipeline.errors import StoreUnavailableError
from pipeline.store.objects import S3Objects, parse_uri
from tests.helpers import SIM_FLAGS, assert_exactly_once
from tests.helpers.bucket_runs import RUN, bucket_run_config, final_view
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen
from tests.objectstore import BUCKET, S3Server, serve_s3
from tests.storeproxy import StoreProxy

LOG = "runs/e2e/_regen/log/"
SLOW = (*SIM_FLAGS, "--decode-rate", "8000")  # 200 prompts of ~300 tokens: several seconds


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    yield from serve_s3(tmp_path, monkeypatch)


def _bucket_config(tmp_path: Path, s3: S3Server, url: str, n: int, output: str = "") -> tuple[Path, list[str]]:
    cfg, ids = bucket_run_config(tmp_path, s3, url, n=n)
    text = cfg.read_text().replace("sync_interval_s = 0.2", f"sync_interval_s = 0.2\n{output}")
    cfg.write_text(text.replace("[output]", f'[output]\njournal_dir = "{tmp_path / "node"}"'))
    return cfg, ids


def _start(cfg: Path, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]
    with (tmp_path / "run.err").open("w") as err:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)


def _wait_for_records(s3: S3Server, proc: subprocess.Popen[str], n: int = 1) -> None:
    deadline = time.monotonic() + 60
    while len(s3.keys(LOG)) < n:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before committing"
        time.sleep(0.05)


def test_a_12_second_outage_is_ridden_out(tmp_path: Path, sim, s3: S3Server) -> None:
    server = sim(*SLOW)
    cfg, ids = _bucket_config(tmp_path, s3, server.url, 200, "remote_sync_s = 0.5")
    host, port = s3.url.removeprefix("http://").split(":")
    with StoreProxy(host, int(port)) as proxy:
        proc = _start(cfg, tmp_path, {**os.environ, "AWS_ENDPOINT_URL": proxy.url})
        _wait_for_records(s3, proc)
        proxy.drop_for(12.0)
        dropped_at = time.monotonic()
        assert proc.poll() is None
        rc = proc.wait(timeout=180)
        ended = time.monotonic()
    err = (tmp_path / "run.err").read_text()
    assert rc == 0, err
    assert proxy.dropped > 0 and "retrying in" in err
    assert ended - dropped_at >= 12.0  # its last commit needed the store back: it rode the outage out, not before it
    assert_exactly_once(final_view(tmp_path), ids, exact=True)


def test_a_store_that_stays_down_is_exit_3_after_the_retry_window(s3: S3Server) -> None:
    host, port = s3.url.removeprefix("http://").split(":")
    with StoreProxy(host, int(port)) as proxy:
        # botocore retrying as regen's own client does (objects._client), so the window is the bound, not its retries
        config = BotoConfig(connect_timeout=2, read_timeout=5, retries={"max_attempts": 2, "mode": "standard"})
        client = boto3.client("s3", endpoint_url=proxy.url, config=config)
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            time.sleep(seconds)

        objects = S3Objects(parse_uri(f"s3://{BUCKET}/x"), client, retry_window_s=2.0, sleep=sleep)
        objects.put("x/a", b"1")
        proxy.drop_for(30.0)
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="kept failing for 2 s") as caught:
            objects.get("x/a")
        assert caught.value.exit_code == 3 and time.monotonic() - started >= 2.0
        # bounded by the window, not by the machine's speed: backoff 0.5 s doubling, never sleeping past the window
        assert slept and sum(slept) <= 2.0 + 1e-6  # an attempt through the dropping proxy takes seconds itself
        assert all(wait <= cap for wait, cap in zip(slept, (0.5, 1.0, 2.0, 4.0), strict=False))


def test_a_lost_lease_is_exit_4(tmp_path: Path, sim, s3: S3Server) -> None:
    server = sim(*SLOW)
    cfg, _ = _bucket_config(tmp_path, s3, server.url, 200, "remote_sync_s = 0.5\nlease_s = 5")
    proc = _start(cfg, tmp_path)
    _wait_for_records(s3, proc)
    other = b'{"owner": "someone-else", "host": "elsewhere", "pid": 1, "expires": 4102444800}'
    s3.client().put_object(Bucket=BUCKET, Key="runs/e2e/_regen/leases/worker-0.json", Body=other)
    rc = proc.wait(timeout=120)
    err = (tmp_path / "run.err").read_text()
    assert rc == 4, err
    assert "lost the lease" in err


def test_a_bucket_emptied_mid_run_stops_the_worker_and_its_rerun_with_exit_3(tmp_path: Path, sim, s3: S3Server) -> None:
    server = sim(*SLOW)
    cfg, _ = _bucket_config(tmp_path, s3, server.url, 200, "remote_sync_s = 0.5")
    proc = _start(cfg, tmp_path)
    _wait_for_records(s3, proc, 2)
    httpx.post(f"{s3.url}/moto-api/reset", timeout=10).raise_for_status()  # the store restarted empty
    s3.client().create_bucket(Bucket=BUCKET)
    s3.client().upload_file(str(tmp_path / "prompts.jsonl"), BUCKET, "inputs/prompts.jsonl")  # the input is back
    rc = proc.wait(timeout=120)
    assert rc in (3, 4), (tmp_path / "run.err").read_text()
    rerun = regen("run", str(cfg), "--no-progress")
    assert rerun.returncode == 3, rerun.stderr
    assert "lost its commit log" in rerun.stderr and "is gone" in rerun.stderr
    assert s3.keys(LOG) == []  # no record written over the loss


@pytest.mark.parametrize("lost", [0, 1], ids=["record-0", "a-middle-record"])
def test_every_reader_reports_a_log_with_lost_records_as_damaged(tmp_path: Path, sim, s3: S3Server, lost: int) -> None:
    server = sim(*SIM_FLAGS)
    cfg, _ = bucket_run_config(tmp_path, s3, server.url, n=120)
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    assert len(s3.keys(LOG)) >= 3
    s3.client().delete_object(Bucket=BUCKET, Key=f"{LOG}{lost:012d}.json")
    fresh = {"XDG_CACHE_HOME": str(tmp_path / "fresh-node")}
    for args in (("status", RUN), ("validate", RUN), ("export", RUN, "--format", "chat", "--out", str(tmp_path / "o"))):
        result = regen(*args, env=fresh)
        assert result.returncode == 3, (args, result.stdout, result.stderr)
        assert "lost its commit log" in result.stderr and f"{lost:012d}" in result.stderr


def test_an_object_regen_did_not_write_is_never_deleted(tmp_path: Path, sim, s3: S3Server) -> None:
    server = sim(*SIM_FLAGS)
    cfg, ids = bucket_run_config(tmp_path, s3, server.url, n=60)
    foreign = "runs/e2e/shards/part-w0-00000-deadbeef.parquet"  # named like a part of worker 0
    s3.client().put_object(Bucket=BUCKET, Key=foreign, Body=b"someone else's file")
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert foreign in s3.keys()
    assert_exactly_once(final_view(tmp_path), ids, exact=True)
