"""Automatic concurrency at real durations (issue 13): requests that last several times `connect_timeout_s`.

Every timeout is scaled down together: connect 0.5 s, health probes every 0.5 s with a 1 s timeout, and requests of
~2.5 s (a 64-slot simulator decoding 300-token completions at 7,680 tokens/s in aggregate). At instant speed the
automatic-concurrency bug hides: a connector capped below the pool's capacity makes requests wait for a free
connection, and that wait used to count as a connect timeout (and made health probes wait behind generations).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.records import Prompt
from tests.helpers import SIM_FLAGS, assert_exactly_once, write_prompts
from tests.helpers.exactly_once import read_rows
from tests.helpers.processes import regen

SLOTS = 64
# 300-token completions at 7,680 tok/s shared by 64 slots: ~2.5 s each, five times connect_timeout_s.
LONG = ("--max-running-requests", str(SLOTS), "--decode-rate", "7680")


def config(tmp_path: Path, url: str, concurrency: int, name: str) -> Path:
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(
        f'[input]\npath = "{tmp_path / "prompts.jsonl"}"\n'
        f'[output]\ndir = "{tmp_path / name}"\nshard_rows = 100\nsync_interval_s = 0.2\n'
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 4096\n'
        "[client]\nmax_attempts = 4\nbackoff_base_s = 0.05\nbackoff_max_s = 0.5\nrequest_timeout_s = 60\n"
        "connect_timeout_s = 0.5\nhealth_interval_s = 0.5\nhealth_timeout_s = 1.0\nhealth_failures = 2\n"
        f'[[endpoints]]\nurl = "{url}"\nconcurrency = {concurrency}\n'
    )
    return cfg


def most_running_during(url: str, cfg: Path) -> int:
    """Run regen on `cfg` to its end; the most requests the server reported decoding at once meanwhile."""
    most, done = 0, threading.Event()

    def watch() -> None:
        nonlocal most
        with httpx.Client(timeout=5) as client:
            while not done.is_set():
                most = max(most, client.get(f"{url}/v1/loads").json()["loads"][0]["num_running_reqs"])
                time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = regen("run", str(cfg), "--no-progress", timeout=180)
    finally:
        done.set()
        watcher.join()
    assert result.returncode == 0, result.stderr
    return most


def test_automatic_concurrency_with_requests_longer_than_the_connect_timeout(tmp_path: Path, sim) -> None:
    """128 prompts on 64 slots, concurrency 0 vs 64: no exhausted retries, and every slot decoding at once (the
    server's own count; the bug kept requests waiting for a connection, so the server saw fewer and the run took
    ~3x as long)."""
    server = sim(*SIM_FLAGS, *LONG, "--seed", "5")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=2 * SLOTS)
    for name, concurrency in (("explicit", SLOTS), ("auto", 0)):
        most = most_running_during(server.url, config(tmp_path, server.url, concurrency, name))
        assert_exactly_once(tmp_path / name, ids)
        rejects = Counter(r["reason"] for r in read_rows(tmp_path / name, "rejects"))
        assert rejects == Counter(), (name, rejects)
        assert most == SLOTS, (name, most)


async def arrived(url: str, n: int) -> None:
    """Until the server reports `n` requests running or waiting (30 s bounds a hang; it is not a measure)."""
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=url, timeout=5) as client:
        for _ in itertools.count():
            load = (await client.get("/v1/loads")).json()["loads"][0]
            if load["num_running_reqs"] + load["num_waiting_reqs"] >= n:
                return
            assert time.monotonic() < deadline, f"the server saw {load} of {n} requests"
            await asyncio.sleep(0.02)


def test_health_probe_is_not_behind_generations(sim) -> None:
    """With 96 generations holding connections, /health and /v1/loads still answer at once. The generations decode
    at 64 tokens/s across 64 slots (minutes each), so the 96 stay at the server however slowly the machine runs; a
    probe queued behind them would wait minutes, past its 5 s timeout."""
    server = sim(*SIM_FLAGS, "--max-running-requests", str(SLOTS), "--decode-rate", "64", "--seed", "6")

    async def scenario() -> tuple[float, dict[str, Any]]:
        cfg = ClientConfig(connect_timeout_s=0.5, request_timeout_s=600)
        async with EndpointClient(
            server.url, gen=GenerationConfig(model="Qwen3.6-27B"), client=cfg, concurrency=0
        ) as client:
            prompts = [Prompt(id=f"h{i}", messages=({"role": "user", "content": f"q{i}"},)) for i in range(96)]
            sends = [asyncio.create_task(client.chat(p, 0, f"regen-h{i}")) for i, p in enumerate(prompts)]
            await arrived(server.url, 96)  # every generation has reached the server (and holds its connection)
            start = time.monotonic()
            await client.check_health(timeout_s=5.0)
            loads = await client.get_json("/v1/loads", timeout_s=5.0)
            probe = time.monotonic() - start
            for send in sends:
                send.cancel()
            await asyncio.gather(*sends, return_exceptions=True)
            return probe, loads["loads"][0]

    probe, load = asyncio.run(scenario())
    assert load["num_running_reqs"] == SLOTS and load["num_waiting_reqs"] == 96 - SLOTS, load
    assert probe < 5.0  # each answered within its timeout; behind the generations it would take minutes
