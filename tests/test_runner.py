"""The runner in-process: a real simulator on this event loop, a real RUN_DIR, real SIGINT/SIGTERM to this process.

What is pinned is the drain: on a signal the intake stops, requests in flight finish (within
`client.drain_timeout_s`) and are stored, the run raises Interrupted (exit 130), and a rerun of the same config
finishes the rest without generating any prompt twice. When the requests outlast the drain timeout (here they last
several times it), they are cancelled and their prompts stay pending: not rejected, not lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from pipeline.config import ClientConfig, Config, EndpointConfig, GenerationConfig, InputConfig, OutputConfig
from pipeline.engine.runner import Runner, RunOptions, worker_from_env
from pipeline.errors import ConfigError, Interrupted
from pipeline.sim import SimConfig, serve
from tests.helpers.exactly_once import committed_ids

MODEL = "Qwen3.6-27B"
PROMPTS = 16


def write_prompts(path: Path, n: int = PROMPTS) -> list[str]:
    ids = [f"p{i:03d}" for i in range(n)]
    path.write_bytes(b"".join(orjson.dumps({"id": i, "prompt": f"Question {i}: explain it."}) + b"\n" for i in ids))
    return ids


def make_config(tmp_path: Path, url: str, *, drain_timeout_s: float) -> Config:
    return Config(
        input=InputConfig(path=str(tmp_path / "prompts.jsonl")),
        output=OutputConfig(dir=str(tmp_path / "run"), shard_rows=100, sync_interval_s=0.1),
        generation=GenerationConfig(model=MODEL, max_tokens=2048),
        client=ClientConfig(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, drain_timeout_s=drain_timeout_s),
        endpoints=(EndpointConfig(url=url, concurrency=4),),
    )


def timed_sim(decode_rate: float) -> SimConfig:
    """Four decode slots; with 100-token answers at `decode_rate` tokens/s, requests last ~decode_rate/100 s."""
    return SimConfig(
        served_model_name=MODEL,
        reasoning_parser="qwen3",
        mean_output_tokens=100,
        decode_tokens_per_s=decode_rate,
        max_running_requests=4,
    )


async def sim_stats(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{url}/_sim/stats")).json()


async def signal_when(
    run: asyncio.Task[Any], url: str, sig: signal.Signals, *, generations: int, in_flight: int
) -> dict[str, Any]:
    """Send `sig` to this process once the simulator has finished and is running enough; returns what it saw.
    Never after the run has ended: its handler is gone by then, and the signal would stop pytest itself."""
    for _ in range(1000):
        stats = await sim_stats(url)
        if run.done():
            break
        if stats["generations_total"] >= generations and stats["in_flight"] >= in_flight:
            os.kill(os.getpid(), sig)
            return stats
        await asyncio.sleep(0.01)
    raise AssertionError("the run ended (or never got that far) before the signal")


def stored(run_dir: Path) -> list[str]:
    return committed_ids(run_dir, "shards") + committed_ids(run_dir, "rejects")


def test_sigint_lets_requests_in_flight_finish_and_store_then_a_rerun_finishes_the_rest(tmp_path: Path) -> None:
    ids = write_prompts(tmp_path / "prompts.jsonl")
    run_dir = tmp_path / "run"

    async def scenario() -> None:
        async with serve(timed_sim(decode_rate=400)) as url:  # requests of ~0.3-1 s; the drain may take 5 s
            cfg = make_config(tmp_path, url, drain_timeout_s=5.0)
            run = asyncio.create_task(Runner(cfg, RunOptions(), None).main())
            seen = await signal_when(run, url, signal.SIGINT, generations=4, in_flight=2)
            with pytest.raises(Interrupted) as caught:
                await run
            assert caught.value.exit_code == 130
            after = await sim_stats(url)
            done = stored(run_dir)
            assert after["cancelled"] == 0  # nothing in flight was cut off
            assert after["generations_total"] == len(done)  # every finished generation is in RUN_DIR
            assert len(done) >= seen["generations_total"] + seen["in_flight"]  # those in flight finished
            assert len(done) < len(ids)  # the intake stopped
            assert committed_ids(run_dir, "rejects") == []

            second = Runner(cfg, RunOptions(), None)
            summary = await second.main()
            assert summary.metrics["already_done"] == len(done) and summary.metrics["pending"] == 0
            final = await sim_stats(url)
            assert final["duplicate_generations"] == 0 and final["generations_total"] == len(ids)

    asyncio.run(scenario())
    both = Counter(stored(run_dir))
    assert sorted(both) == ids and set(both.values()) == {1}


def test_requests_that_outlast_the_drain_are_cancelled_and_stay_pending(tmp_path: Path) -> None:
    ids = write_prompts(tmp_path / "prompts.jsonl")
    run_dir = tmp_path / "run"

    async def scenario() -> None:
        async with serve(timed_sim(decode_rate=100)) as url:  # requests of ~1.5-4 s, the drain is 0.2 s
            cfg = make_config(tmp_path, url, drain_timeout_s=0.2)
            runner = Runner(cfg, RunOptions(), None)
            run = asyncio.create_task(runner.main())
            seen = await signal_when(run, url, signal.SIGTERM, generations=0, in_flight=4)
            with pytest.raises(Interrupted):
                await run
            after = await sim_stats(url)
            assert seen["generations_total"] == 0 and after["generations_total"] == 0
            assert after["cancelled"] == 4  # the drain gave up on them and the server stopped decoding
            assert stored(run_dir) == []  # cancelled prompts are pending: not rejected, not lost
            assert runner.metrics.rejected == 0

        async with serve(timed_sim(decode_rate=0)) as fast:  # instant: the rerun finishes at once
            summary = await Runner(make_config(tmp_path, fast, drain_timeout_s=0.2), RunOptions(), None).main()
            assert summary.metrics["already_done"] == 0 and summary.metrics["accepted"] == len(ids)

    asyncio.run(scenario())
    assert sorted(stored(run_dir)) == ids


def test_an_endpoint_down_at_start_joins_the_run_once_it_comes_up(tmp_path: Path) -> None:
    ids = write_prompts(tmp_path / "prompts.jsonl", n=24)
    with socket.socket() as sock:  # a port nothing listens on yet, as a server still loading its weights
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def scenario() -> None:
        async with serve(timed_sim(decode_rate=400)) as up:
            cfg = make_config(tmp_path, up, drain_timeout_s=5.0)
            late_url = f"http://127.0.0.1:{port}"
            cfg = dataclasses.replace(
                cfg,
                endpoints=(*cfg.endpoints, EndpointConfig(url=late_url, concurrency=4)),
                client=dataclasses.replace(cfg.client, health_interval_s=0.1, health_timeout_s=1.0),
            )
            run = asyncio.create_task(Runner(cfg, RunOptions(), None).main())
            for _ in range(500):
                if (await sim_stats(up))["generations_total"] >= 2 or run.done():
                    break
                await asyncio.sleep(0.01)
            assert not run.done()  # the run started on the one endpoint that was up
            async with serve(dataclasses.replace(timed_sim(decode_rate=400), port=port)):
                summary = await run
                late = await sim_stats(late_url)
            assert late["generations_total"] > 0  # preflighted, admitted, and given work
            assert late["probes"]["requests"] >= 1  # admitted through preflight, not on trust
            assert summary.metrics["accepted"] == len(ids)

    asyncio.run(scenario())
    assert sorted(stored(tmp_path / "run")) == ids


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (0, 1)),
        ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "2"}, (3, 4)),
        ({"JOB_COMPLETION_INDEX": "3", "REGEN_NUM_WORKERS": "4"}, (3, 4)),
        ({"JOB_COMPLETION_INDEX": "0", "REGEN_NUM_WORKERS": "1"}, (0, 1)),
    ],
    ids=["alone", "slurm-array", "k8s-indexed-job", "k8s-one"],
)
def test_the_worker_index_defaults_from_slurm_or_kubernetes(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: tuple[int, int]
) -> None:
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "JOB_COMPLETION_INDEX",
                 "REGEN_NUM_WORKERS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert worker_from_env(None, None) == expected


def test_an_indexed_job_without_a_worker_count_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REGEN_NUM_WORKERS", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "2")
    with pytest.raises(ConfigError, match="set REGEN_NUM_WORKERS"):
        worker_from_env(None, None)


def test_counts_made_a_slice_of_hashes_at_a_time_are_the_whole_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_count` walks the input's hashes COUNT_IDS at a time (issue 40: flat memory); with slices of 7 over 50 ids
    and two workers, what a worker owns and what is already done are the same as counted at once."""
    from pipeline.engine import runner
    from pipeline.store.partition import id_hash, owns

    monkeypatch.setattr(runner, "COUNT_IDS", 7)
    ids = write_prompts(tmp_path / "prompts.jsonl", 50)
    mine = [i for i in ids if owns(id_hash(i), 0, 2)]
    assert 7 < len(mine) < 50

    async def scenario() -> None:
        async with serve(timed_sim(decode_rate=0)) as url:
            cfg = make_config(tmp_path, url, drain_timeout_s=1.0)
            first = await Runner(cfg, RunOptions(num_workers=2, limit=5), None).main()
            assert first.metrics["total"] == len(mine) and first.metrics["accepted"] == 5
            again = await Runner(cfg, RunOptions(num_workers=2), None).main()
            assert again.metrics["total"] == len(mine) and again.metrics["already_done"] == 5
            assert again.metrics["accepted"] == len(mine) - 5

    asyncio.run(scenario())
    assert sorted(stored(tmp_path / "run")) == mine
