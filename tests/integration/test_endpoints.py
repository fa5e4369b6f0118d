"""Many endpoints that fail: kills, hangs, error bursts, restarts, endpoints-file changes, sglang-router."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
import orjson
import pytest

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_prompts
from tests.helpers.endpoint_runs import config, start_run, wait_for
from tests.helpers.exactly_once import committed_ids, read_rows
from tests.helpers.paths import ROOT
from tests.helpers.processes import SimProcess, regen

SLOW = ("--decode-rate", "6000", "--max-running-requests", "8", "--mean-output-tokens", "300")


def endpoint_counts(run_dir: Path) -> Counter[str]:
    return Counter(r["endpoint"] for r in read_rows(run_dir, "shards"))


def test_killed_hung_and_flaky_endpoints(tmp_path: Path, sim) -> None:
    good = sim(*SIM_FLAGS, *SLOW, "--seed", "1")
    dying = sim(*SIM_FLAGS, *SLOW, "--seed", "2")
    hanging = sim(*SIM_FLAGS, *SLOW, "--seed", "3")
    flaky = sim(*SIM_FLAGS, *SLOW, "--seed", "4", "--fail-500", "0.1", "--fail-503", "0.1")
    flaky2 = sim(*SIM_FLAGS, *SLOW, "--seed", "5", "--fail-reset", "0.1", "--fail-invalid-json", "0.1")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=300)
    urls = [good.url, dying.url, hanging.url, flaky.url, flaky2.url]
    proc = start_run(config(tmp_path, urls))
    wait_for(lambda: dying.stats()["generations_total"] >= 10 and hanging.stats()["generations_total"] >= 5)
    dying.proc.send_signal(signal.SIGKILL)  # a node lost
    os.kill(hanging.proc.pid, signal.SIGSTOP)  # a frozen process: accepts connections, never answers
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        os.kill(hanging.proc.pid, signal.SIGCONT)
    assert proc.returncode == 0, err
    run_dir = tmp_path / "run"
    good_ids, bad_ids = assert_exactly_once(run_dir, ids)
    counts = endpoint_counts(run_dir)
    assert counts[good.url] > counts[dying.url] and counts[good.url] > counts[hanging.url]
    # hangs and kills moved prompts elsewhere without burning their attempts: nothing exhausted its retries
    rejects = Counter(r["reason"] for r in read_rows(run_dir, "rejects"))
    assert rejects["exhausted_retries"] <= 3, rejects
    assert len(good_ids) >= 297


def test_endpoint_that_comes_back_is_used_again(tmp_path: Path, sim) -> None:
    steady = sim(*SIM_FLAGS, *SLOW, "--seed", "1")
    flapping = sim(*SIM_FLAGS, *SLOW, "--seed", "2")
    port = flapping.url.rsplit(":", 1)[1]
    ids = write_prompts(tmp_path / "prompts.jsonl", n=300)
    proc = start_run(config(tmp_path, [steady.url, flapping.url]))
    wait_for(lambda: flapping.stats()["generations_total"] >= 10)
    flapping.proc.send_signal(signal.SIGKILL)
    flapping.proc.wait()
    before = steady.stats()["generations_total"]
    wait_for(lambda: steady.stats()["generations_total"] >= before + 10)  # the run went on without it
    back = sim(*SIM_FLAGS, *SLOW, "--seed", "2", "--port", port)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert back.stats()["generations_total"] > 0  # the restarted server took work again
    assert_exactly_once(tmp_path / "run", ids)


def test_endpoints_file_adds_and_drains(tmp_path: Path, sim) -> None:
    first = sim(*SIM_FLAGS, *SLOW, "--seed", "1")
    second = sim(*SIM_FLAGS, *SLOW, "--seed", "2")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=300)
    eps = tmp_path / "endpoints.txt"
    eps.write_text(f"{first.url} 8\n")
    cfg = config(tmp_path, [], extra=f'endpoints_file = "{eps}"')
    proc = start_run(cfg)
    wait_for(lambda: first.stats()["generations_total"] >= 10)
    assert second.stats()["generations_total"] == 0
    eps.write_text(f"{second.url} 8\n")  # the second joins, the first drains
    wait_for(lambda: second.stats()["generations_total"] >= 5)
    wait_for(lambda: first.stats()["in_flight"] == 0)  # drained: what it was given before has ended
    first_after_drain = first.stats()["generations_total"]
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert first.stats()["generations_total"] == first_after_drain  # took no new work after draining
    assert_exactly_once(tmp_path / "run", ids)


def test_streaming_detects_a_stall(tmp_path: Path, sim) -> None:
    stalling = sim(*SIM_FLAGS, "--mean-output-tokens", "200", "--fail-stall", "0.2", "--seed", "7")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=30)
    cfg = config(tmp_path, [stalling.url], client="stream = true\nstall_timeout_s = 1.0")
    start = time.monotonic()
    result = regen("run", str(cfg), "--no-progress", "--skip-preflight")
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert_exactly_once(tmp_path / "run", ids)
    stats = stalling.stats()
    assert stats["faults"].get("stall", 0) >= 1
    assert stats["cancelled"] >= 1  # the client told the server to stop (abort_request) or hung up
    assert elapsed < 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def router():
    procs: list[subprocess.Popen[bytes]] = []

    def start(urls: list[str]) -> str:
        port, metrics = free_port(), free_port()
        argv = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *urls]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(metrics)]
        argv += ["--policy", "round_robin", "--health-check-interval-secs", "1", "--log-level", "warn"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/readiness", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout=30)
        return url

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_through_sglang_router(tmp_path: Path, sim, router) -> None:
    workers = [sim(*SIM_FLAGS, *SLOW, "--seed", str(i)) for i in range(3)]
    url = router([w.url for w in workers])
    ids = write_prompts(tmp_path / "prompts.jsonl", n=150)
    proc = start_run(config(tmp_path, [url]))
    wait_for(lambda: workers[0].stats()["generations_total"] >= 5)
    workers[0].proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert_exactly_once(tmp_path / "run", ids)
    assert all(w.stats()["generations_total"] > 0 for w in workers[1:])
    assert set(committed_ids(tmp_path / "run", "shards")) | set(committed_ids(tmp_path / "run", "rejects")) == set(ids)


_ = SimProcess


def test_server_restarted_with_other_args_leaves_the_pool(tmp_path: Path, sim) -> None:
    mtp = ("--speculative-algorithm", "EAGLE", "--mamba-radix-cache-strategy", "extra_buffer")
    steady = sim(*SIM_FLAGS, *SLOW, *mtp, "--seed", "1")
    changing = sim(*SIM_FLAGS, *SLOW, *mtp, "--seed", "2")
    port = changing.url.rsplit(":", 1)[1]
    ids = write_prompts(tmp_path / "prompts.jsonl", n=300)
    cfg = config(tmp_path, [steady.url, changing.url])
    cfg.write_text(cfg.read_text() + '\n[expect]\nspeculative_algorithm = "EAGLE"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: changing.stats()["generations_total"] >= 10)
    changing.proc.send_signal(signal.SIGKILL)
    changing.proc.wait()
    # the same port comes back without speculative decoding and with another mamba strategy
    other = ("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule")
    back = sim(*SIM_FLAGS, *SLOW, *other, "--seed", "2", "--port", port)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert back.stats()["generations_total"] == 0  # never used again
    assert_exactly_once(tmp_path / "run", ids)
    metrics = (tmp_path / "run" / "metrics" / "worker-0.jsonl").read_text()
    assert "restarted with a different configuration" in metrics
    assert "speculative_algorithm" in metrics


def test_stall_is_detected_within_the_stall_timeout(tmp_path: Path, sim) -> None:
    """One prompt, one attempt on a server that stalls it: given up stall_timeout_s (2 s) after the run started
    sending, not request_timeout_s (60 s). Both times are regen's own (its start log line, the reject's created_at),
    not two processes' wall times; the upper bound is 3x the stall timeout."""
    stalling = sim(*SIM_FLAGS, "--mean-output-tokens", "100", "--fail-stall", "1.0")
    write_prompts(tmp_path / "prompts.jsonl", n=1)
    cfg = config(tmp_path, [stalling.url], client="stream = true\nstall_timeout_s = 2.0\nmax_attempts = 1")
    cfg.write_text(cfg.read_text().replace("max_attempts = 4\n", ""))
    result = regen("run", str(cfg), "--no-progress", "--skip-preflight")
    assert result.returncode == 0, result.stderr
    rejects = read_rows(tmp_path / "run", "rejects")
    assert [r["reason"] for r in rejects] == ["exhausted_retries"]
    assert "stalled" in rejects[0]["detail"]
    started = next(line for line in result.stderr.splitlines() if " regen.run: run " in line)
    sent_from = datetime.fromisoformat(started.split(" ", 1)[0].replace("Z", "+00:00"))
    given_up = (rejects[0]["created_at"] - sent_from).total_seconds()
    assert 2.0 <= given_up < 3 * 2.0, (given_up, result.stderr)
    assert stalling.stats()["cancelled"] == 1


def test_automatic_concurrency_fills_the_batch_with_a_small_queue(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS, "--max-running-requests", "8", "--decode-rate", "6000", "--mean-output-tokens", "300")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=150)
    cfg = config(tmp_path, [server.url])
    cfg.write_text(cfg.read_text().replace("concurrency = 8", "concurrency = 0"))
    result = regen("run", str(cfg), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert_exactly_once(tmp_path / "run", ids)
    snaps = [orjson.loads(line) for line in (tmp_path / "run" / "metrics" / "worker-0.jsonl").read_bytes().splitlines()]
    ep = [s["endpoints"][server.url] for s in snaps if s["endpoints"]]
    assert ep[0]["capacity_source"] in ("server advertises 8", "adjusted from /v1/loads")
    assert all(8 <= e["capacity"] <= 12 for e in ep), [e["capacity"] for e in ep]  # 8 slots + a queue of 2
    assert max(e["inflight"] for e in ep) >= 8  # the batch was kept full
