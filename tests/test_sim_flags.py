"""`regen sim` takes the emulated release's whole flag list, echoes what it was given, and runs the capacity SGLang
would run (issue 19: the motivating command)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from pipeline.sim import SimConfig, SimStartupError, serve
from pipeline.sim.state import Sim

VERSIONS = ["0.5.9", "0.5.10", "0.5.12", "0.5.14", "0.5.15", "0.5.19", "0.5.23"]
# configs/qwen36-27b-mtp.toml's [launch].args, with the mamba cache capped as in the issue (and the old flag name,
# which every release up to 0.5.19 takes).
MOTIVATING = [
    "--model-path", "Qwen/Qwen3.6-27B", "--served-model-name", "Qwen3.6-27B", "--tp-size", "4",
    "--reasoning-parser", "qwen3", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--mamba-scheduler-strategy", "extra_buffer", "--max-mamba-cache-size", "24", "--mamba-full-memory-ratio", "0.8",
    "--mem-fraction-static", "0.92", "--trust-remote-code",
]  # fmt: skip
# (effective max running requests, why) per release: 0.5.9 holds 3 + 1 slots per request with spec; from 0.5.10
# 3 + 2 with the overlap scheduler on (0.5.10 runs spec v1, overlap off, without SGLANG_ENABLE_SPEC_V2: 3 + 1).
EXPECTED_CAP = {"0.5.9": 6, "0.5.10": 6, "0.5.12": 4, "0.5.14": 4, "0.5.15": 4, "0.5.19": 4}


def _info(argv: list[str]) -> dict[str, Any]:
    return Sim(SimConfig.from_argv(argv, env={})).server_info()


@pytest.mark.parametrize("version", list(EXPECTED_CAP), ids=list(EXPECTED_CAP))
def test_motivating_command_starts_and_echoes_its_flags(version: str) -> None:
    info = _info([*MOTIVATING, "--sim-version", version])
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == EXPECTED_CAP[version]
    assert info["max_running_requests"] == 48
    assert info["mem_fraction_static"] == 0.92
    assert info["trust_remote_code"] is True
    assert info["mamba_full_memory_ratio"] == 0.8
    assert info["max_mamba_cache_size"] == 24
    assert info["tp_size"] == 4


def test_motivating_command_on_0_5_10_with_spec_v2_runs_4() -> None:
    config = SimConfig.from_argv([*MOTIVATING, "--sim-version", "0.5.10"], env={"SGLANG_ENABLE_SPEC_V2": "1"})
    assert Sim(config).server_info()["internal_states"][0]["effective_max_running_requests_per_dp"] == 4


def test_motivating_command_on_0_5_23_needs_the_new_flag_name() -> None:
    with pytest.raises(SimStartupError, match="unrecognized arguments: --mamba-scheduler-strategy") as info:
        SimConfig.from_argv([*MOTIVATING, "--sim-version", "0.5.23"])
    assert info.value.exit_code == 2
    argv = [a.replace("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy") for a in MOTIVATING]
    server = _info([*argv, "--sim-version", "0.5.23"])
    assert server["internal_states"][0]["effective_max_running_requests_per_dp"] == 4
    assert server["mem_fraction_static"] == 0.92


def test_unset_mem_fraction_is_a_computed_stand_in_not_an_echo() -> None:
    assert _info(["--sim-version", "0.5.14"])["mem_fraction_static"] == 0.85


@pytest.mark.parametrize(
    ("version", "uses_mamba_radix_cache", "kv_events", "launch_command"),
    [
        ("0.5.9", False, False, False),
        ("0.5.12", False, False, False),
        ("0.5.14", False, True, False),
        ("0.5.19", True, True, False),
        ("0.5.23", True, True, True),
    ],
    ids=["0.5.9", "0.5.12", "0.5.14", "0.5.19", "0.5.23"],
)
def test_server_info_keys_per_release(
    version: str, uses_mamba_radix_cache: bool, kv_events: bool, launch_command: bool
) -> None:
    info = _info(["--sim-version", version])
    assert ("uses_mamba_radix_cache" in info) is uses_mamba_radix_cache
    assert ("kv_events" in info) is kv_events
    assert ("launch_command" in info) is launch_command
    old = version in ("0.5.9", "0.5.12")
    assert ("mamba_scheduler_strategy" in info) is old
    assert ("mamba_radix_cache_strategy" in info) is not old


@pytest.mark.parametrize(
    ("version", "algorithm", "refusal"),
    [
        ("0.5.10", "DFLASH", "argument --speculative-algorithm: invalid choice: 'DFLASH'"),
        ("0.5.12", "DFLASH", None),
        ("0.5.12", "eagle", None),
        ("0.5.12", "MEDUSA", "Unknown speculative algorithm name: MEDUSA"),
        ("0.5.23", "DSPARK", None),
    ],
    ids=["choices-0.5.10", "free-text-0.5.12", "lower-case-0.5.12", "unknown-0.5.12", "new-name-0.5.23"],
)
def test_speculative_algorithm_is_free_text_from_0_5_12(version: str, algorithm: str, refusal: str | None) -> None:
    argv = ["--model-path", "Qwen/Qwen3-8B", "--sim-version", version, "--speculative-algorithm", algorithm]
    if refusal is None:
        assert SimConfig.from_argv(argv).speculative_algorithm == algorithm
        return
    with pytest.raises(SimStartupError, match=refusal):
        SimConfig.from_argv(argv)


def test_sim_process_takes_the_full_flag_list_and_refuses_unknown_ones() -> None:
    base = [sys.executable, "-m", "pipeline", "sim", "--port", "0"]
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_ENABLE_SPEC_V2"}
    bad = subprocess.run([*base, "--no-such-flag"], capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr
    proc = subprocess.Popen(
        [*base, *MOTIVATING, "--sim-version", "0.5.14"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 4
        assert info["mem_fraction_static"] == 0.92
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_loads_report_the_same_capacity_over_http() -> None:
    async def go() -> None:
        config = SimConfig.from_argv([*MOTIVATING, "--sim-version", "0.5.19"], env={})
        async with serve(config) as url, httpx.AsyncClient(base_url=url) as c:
            loads = (await c.get("/v1/loads")).json()
            assert loads["loads"][0]["max_running_requests"] == 4

    asyncio.run(go())
