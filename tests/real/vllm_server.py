"""A real vLLM server for the tests marked `real_server`: the environment scripts/real_server.sh built (found, never
built here), and one `vllm serve` of its tiny model on 127.0.0.1 at a free port, ready once `/health` answers and
`/v1/models` lists the model (polled, never slept for), stopped with its whole process group. The fixtures that
start one per session are in conftest.py beside this file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers.paths import ROOT

SCRIPT = ROOT / "scripts" / "real_server.sh"
MODEL_NAME = "tiny-qwen3"
CONTEXT = 4096
START_TIMEOUT_S = 600.0  # the first start compiles the model (~1 min here, ~30 s once vLLM's compile cache has it)
SERVER_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",  # else it loads the AVX-512 kernels and dies with SIGILL on AVX2 machines
    "VLLM_HOST_IP": "127.0.0.1",  # else its engine binds the host's address
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


@dataclass(frozen=True)
class RealEnv:
    venv: Path
    model: Path


class VllmServer:
    """One `vllm serve` of the tiny model in its own process group (its engine runs in child processes)."""

    def __init__(self, env: RealEnv, log: Path, extra: tuple[str, ...] = ()):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.args = [
            str(env.venv / "bin" / "vllm"), "serve", str(env.model), "--served-model-name", MODEL_NAME,
            "--reasoning-parser", "qwen3", "--max-model-len", str(CONTEXT),
            "--host", "127.0.0.1", "--port", str(self.port), *extra,
        ]  # fmt: skip
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                self.args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **SERVER_ENV},
                cwd=log.parent,
                start_new_session=True,
            )
        self.started_in = self._wait_ready()

    def _wait_ready(self) -> float:
        start = time.monotonic()
        with httpx.Client(timeout=5) as client:
            while True:
                if self.proc.poll() is not None:
                    pytest.fail(f"vllm serve exited {self.proc.returncode} before it was ready:\n{self.tail()}")
                if time.monotonic() - start > START_TIMEOUT_S:
                    self.stop()
                    pytest.fail(f"vllm serve was not ready after {START_TIMEOUT_S:.0f} s:\n{self.tail()}")
                try:
                    ready = client.get(f"{self.url}/health").status_code == 200
                    models = client.get(f"{self.url}/v1/models").json()["data"] if ready else []
                except (httpx.HTTPError, ValueError, KeyError):
                    models = []
                if any(m.get("id") == MODEL_NAME for m in models):
                    return time.monotonic() - start
                time.sleep(0.25)

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus counters and gauges, each series summed over its labels but the ones named in
        the key: `vllm:request_success_total{finished_reason="abort"}` and `vllm:request_success_total` both."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        values: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("vllm:"):
                continue
            series, _, value = line.rpartition(" ")
            name = series.split("{", 1)[0]
            values[name] = values.get(name, 0.0) + float(value)
            if 'finished_reason="' in series:
                reason = series.split('finished_reason="', 1)[1].split('"', 1)[0]
                key = f'{name}{{finished_reason="{reason}"}}'
                values[key] = values.get(key, 0.0) + float(value)
        return values

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """SIGTERM to the whole group (vLLM shuts its engine down), SIGKILL to what is left after 60 s."""
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.proc.pid, signal.SIGKILL)  # any engine process the API server left behind
        self.proc.wait(timeout=30)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def missing(why: str) -> None:
    """Skip saying what is missing and how to build it; fail so in CI (CI set), which builds it first
    (scripts/test.sh): a missing environment there is a broken build, never a silent skip."""
    message = (
        f"no real vLLM server: {why}\n"
        f"build it with `bash scripts/real_server.sh` (~10 min the first time, then cached; "
        f"REGEN_REAL_SERVER_HOME chooses where)"
    )
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def find_env() -> RealEnv:
    """The built venv and model, as `scripts/real_server.sh check` reports them; skips (fails in CI) where missing."""
    if not SCRIPT.exists():
        missing(f"{SCRIPT} is absent")
    result = subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        missing(result.stderr.strip() or f"scripts/real_server.sh check exited {result.returncode}")
    paths = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return RealEnv(venv=Path(paths["VENV"]), model=Path(paths["MODEL"]))
