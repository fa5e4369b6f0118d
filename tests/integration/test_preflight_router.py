"""Preflight behind the real sglang-router: its /get_server_info describes the router, so each worker it lists at
/workers is checked, and a drifted worker is named."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from typing import Any

import httpx
import pytest

from pipeline.config import config_from_dict
from pipeline.server.preflight import format_preflight, preflight_endpoint
from pipeline.sim import SimConfig, serve

pytest.importorskip("sglang_router")

MODEL = "Qwen3.6-27B"
GOOD = ["--served-model-name", MODEL, "--reasoning-parser", "qwen3", "--speculative-algorithm", "EAGLE",
        "--mamba-radix-cache-strategy", "extra_buffer"]  # fmt: skip
DRIFTED = ["--served-model-name", MODEL, "--reasoning-parser", "qwen3"]  # spec off, auto strategy


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_router(url: str, proc: asyncio.subprocess.Process, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:
            assert proc.returncode is None, "the router exited"
            try:
                if (await http.get(f"{url}/readiness")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the router did not become ready")


def test_router_workers_are_checked_one_by_one() -> None:
    cfg = config_from_dict(
        {"generation": {"model": MODEL}, "expect": {"speculative_algorithm": "EAGLE", "reasoning_parser": "qwen3"}}
    )

    async def main() -> tuple[dict[str, Any], str, str]:
        async with serve(SimConfig.from_argv(GOOD)) as good, serve(SimConfig.from_argv(DRIFTED)) as drifted:
            port = _free_port()
            argv = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", good, drifted,
                    "--host", "127.0.0.1", "--port", str(port), "--log-level", "warn"]  # fmt: skip
            devnull = asyncio.subprocess.DEVNULL
            proc = await asyncio.create_subprocess_exec(*argv, stdout=devnull, stderr=devnull)
            try:
                await _wait_router(f"http://127.0.0.1:{port}", proc)
                report = await preflight_endpoint(f"http://127.0.0.1:{port}", cfg)
            finally:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 10)
            return report, good, drifted

    report, good, drifted = asyncio.run(main())
    assert not report["ok"]
    assert sorted(w["url"] for w in report["workers"]) == sorted([good, drifted])
    failed = [c for c in report["checks"] if not c["ok"]]
    assert [(c.get("worker"), c["key"], c["actual"]) for c in failed] == [(drifted, "speculative_algorithm", None)]
    assert report["info"]["probe_rid"].startswith("regen-probe-") and report["info"]["router_workers"]
    assert report["info"]["simulator"] is True  # both workers are simulators
    concurrency = next(c for c in report["checks"] if c["name"] == "concurrency")
    assert concurrency["actual"] == sum(w["info"]["effective_max_running_requests"] for w in report["workers"])
    assert drifted in format_preflight({"ok": False, "endpoints": [report]})
