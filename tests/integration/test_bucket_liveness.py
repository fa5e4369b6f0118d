"""`regen status` on a run in a bucket tells a live worker from a dead one from any node (issue 28, liveness in a
bucket): the worker's lease is its heartbeat (store/heartbeat.py `from_lease`). The real CLI against the simulator
and a local S3 server (moto); `status` runs as another node would, with its own working copy."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.inspection import format_status, run_status
from pipeline.store import heartbeat
from tests.helpers import SIM_FLAGS
from tests.helpers.bucket_runs import RUN, bucket_run_config, final_view
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen
from tests.objectstore import BUCKET, S3Server, serve_s3

LEASE = "runs/e2e/_regen/leases/worker-0.json"
LEASE_S = 5  # the shortest output.lease_s: a killed worker on another host is dead within seconds


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    yield from serve_s3(tmp_path, monkeypatch)


def _start(cfg: Path, tmp_path: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]
    with (tmp_path / "run.err").open("w") as err:  # a file, not a pipe nobody reads while the run lasts
        return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True)


def _other_node(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`regen status RUN` from a node that never ran a worker: its own, empty, working copy."""
    result = regen("status", RUN, *flags, env={"XDG_CACHE_HOME": str(tmp_path / "node-b")})
    assert result.returncode == 0, result.stderr
    return result


def _poll(tmp_path: Path, until: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not until(status := json.loads(_other_node(tmp_path, "--json").stdout)):
        assert time.monotonic() < deadline, f"status never got there: {status['workers']}"
        time.sleep(0.2)
    return status


def _wait_for_start(s3: S3Server, proc: subprocess.Popen[str], tmp_path: Path) -> None:
    deadline = time.monotonic() + 60
    while not {LEASE, "runs/e2e/run.json"} <= set(s3.keys("runs/e2e/")):
        assert proc.poll() is None, (tmp_path / "run.err").read_text()
        assert time.monotonic() < deadline, "the run never took its lease"
        time.sleep(0.1)


def test_status_from_another_node_shows_the_worker_live_then_dead_after_sigkill(tmp_path: Path, sim, s3) -> None:
    server = sim(*SIM_FLAGS, "--decode-rate", "1000", "--max-running-requests", "4")
    cfg, _ = bucket_run_config(tmp_path, s3, server.url, n=400)
    cfg.write_text(cfg.read_text().replace("sync_interval_s = 0.2", f"sync_interval_s = 0.2\nlease_s = {LEASE_S}"))
    proc = _start(cfg, tmp_path)
    try:
        _wait_for_start(s3, proc, tmp_path)
        live = _poll(tmp_path, lambda s: s["live_workers"] == 1)
        assert proc.poll() is None, "the run ended before status saw it live"
        [worker] = live["workers"]
        assert (worker["worker"], worker["host"], worker["pid"]) == (0, socket.gethostname(), proc.pid)
        assert worker["state"] == "running" and 0 <= worker["heartbeat_age_s"] <= LEASE_S
        text = _other_node(tmp_path).stdout
        assert f"worker 0: {socket.gethostname()} pid {proc.pid}" in text and "no live worker" not in text
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    dead = _poll(tmp_path, lambda s: s["live_workers"] == 0)
    [worker] = dead["workers"]
    assert not worker["live"] and worker["pid"] == proc.pid
    assert dead["eta_s"] is None and dead["rates"]["recent_completions_per_s"] == 0.0
    assert "no live worker" in _other_node(tmp_path).stdout


def test_a_lease_of_a_worker_on_another_host_goes_stale_at_its_expiry(tmp_path: Path, sim, s3) -> None:
    """No process to look for on another host: the lease is the only sign of life, live until it expires."""
    server = sim(*SIM_FLAGS, "--decode-rate", "1000", "--max-running-requests", "4")
    cfg, _ = bucket_run_config(tmp_path, s3, server.url, n=400)
    proc = _start(cfg, tmp_path)
    try:
        _wait_for_start(s3, proc, tmp_path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    client = s3.client()
    note = orjson.loads(client.get_object(Bucket=BUCKET, Key=LEASE)["Body"].read())
    client.put_object(Bucket=BUCKET, Key=LEASE, Body=orjson.dumps({**note, "host": "gpu-node-7"}))
    copy = final_view(tmp_path)
    [before] = run_status(copy, now=note["since"] + 1)["workers"]
    assert (before["host"], before["live"], before["heartbeat_age_s"]) == ("gpu-node-7", True, 1.0)
    after = run_status(copy, now=note["expires"] + 1)
    assert after["live_workers"] == 0 and after["workers"][0]["state"].startswith("lease not renewed for ")
    assert "no live worker" in format_status(after)


def _beat(**holder: Any) -> heartbeat.Beat:
    base = {"owner": "o", "host": "gpu-node-7", "pid": 41, "role": "worker", "taken": 90.0, "since": 100.0}
    return heartbeat.from_lease(3, {**base, "expires": 105.0, **holder})


@pytest.mark.parametrize(
    ("holder", "now", "live", "state"),
    [
        ({}, 104.0, True, "running"),
        ({}, 106.0, False, "lease not renewed for 6s"),
        ({"released": True, "expires": 0}, 101.0, False, "released"),
        ({"role": "recovering"}, 101.0, False, "recovering"),
        ({"host": None, "pid": None, "since": None, "expires": "soon"}, 101.0, False, "lease not renewed for 101s"),
    ],
    ids=["renewed", "expired", "released", "another-worker-recovering-it", "unreadable-note"],
)
def test_a_lease_read_as_a_heartbeat(holder: dict[str, Any], now: float, live: bool, state: str) -> None:
    assert _beat(**holder).liveness(now, host="status-node") == (live, state)


def test_a_released_lease_takes_how_it_ended_from_the_same_process_local_beat() -> None:
    local = heartbeat.Beat(3, "gpu-node-7", 41, 100.0, 90.0, "finished")
    assert heartbeat.from_lease(3, {"host": "gpu-node-7", "pid": 41, "released": True}, local).state == "finished"
    assert heartbeat.from_lease(3, {"host": "gpu-node-7", "pid": 42, "released": True}, local).state == "released"
