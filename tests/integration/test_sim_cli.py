"""`python -m pipeline.sim` (= `regen sim`) as a real process: first stdout line, startup rejections, SIGTERM, die."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _start(*flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.sim", "--port", "0", *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _url(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("http://127.0.0.1:"), line
    return line


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()  # reaps the process and closes its pipes


def test_help_documents_every_flag() -> None:
    out = subprocess.run([sys.executable, "-m", "pipeline.sim", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0
    for flag in (
        "--model-path",
        "--served-model-name",
        "--context-length",
        "--max-running-requests",
        "--max-queued-requests",
        "--reasoning-parser",
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--mamba-scheduler-strategy",
        "--mamba-radix-cache-strategy",
        "--disable-radix-cache",
        "--disable-overlap-schedule",
        "--api-key",
        "--enable-metrics",
        "--host",
        "--port",
        "--sim-version",
        "--decode-rate",
        "--mean-output-tokens",
        "--seed",
        "--fail-500",
        "--fail-503",
        "--fail-reset",
        "--fail-hang",
        "--fail-empty",
        "--fail-answer-in-reasoning",
        "--fail-invalid-json",
        "--fail-stall",
        "--trickle-s",
        "--die-after",
        "--down-after",
        "--down-for",
        "--slow-start",
        "--warmup",
    ):
        assert flag in out.stdout, flag


@pytest.mark.parametrize(
    ("flags", "code", "message"),
    [
        (
            ["--mamba-scheduler-strategy", "extra_buffer"],
            2,
            "error: unrecognized arguments: --mamba-scheduler-strategy",
        ),
        (
            ["--sim-version", "0.5.10", "--speculative-algorithm", "EAGLE"],
            1,
            "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache",
        ),
    ],
    ids=["old-flag-0.5.23", "spec-no-buffer-0.5.10"],
)
def test_startup_rejections(flags: list[str], code: int, message: str) -> None:
    proc = _start(*flags)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert out == ""
    assert message in err


def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll the server's own state until `check` holds (a deadline for a hung server, not a synchronisation)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the simulator never reached the state"
        time.sleep(0.01)


def test_serves_then_drains_on_sigterm() -> None:
    proc = _start("--decode-rate", "200", "--max-running-requests", "2", "--model-path", "Qwen/Qwen3-8B")
    try:
        url = _url(proc)
        assert httpx.get(url + "/health").status_code == 200
        result: dict[str, int] = {}

        def slow() -> None:  # 600 tokens at 200/s: 3 s of decode, while the test watches the drain
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 600, "ignore_eos": True}
            result["status"] = httpx.post(url + "/v1/chat/completions", json=body, timeout=20).status_code

        thread = threading.Thread(target=slow)
        thread.start()
        _until(lambda: httpx.get(url + "/v1/loads").json()["loads"][0]["num_running_reqs"] == 1)
        proc.send_signal(signal.SIGTERM)
        _until(lambda: httpx.get(url + "/health").status_code == 503)  # draining: unhealthy, still serving
        assert httpx.get(url + "/v1/loads").json()["loads"][0]["num_running_reqs"] == 1  # the request still runs
        thread.join(timeout=20)
        assert result["status"] == 200
        assert proc.wait(timeout=10) == 0
    finally:
        _stop(proc)


def test_die_after_exits_the_process() -> None:
    proc = _start("--die-after", "1", "--mean-output-tokens", "20")
    try:
        url = _url(proc)
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10}
        assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 200
        assert proc.wait(timeout=10) == 1
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health")
    finally:
        _stop(proc)
