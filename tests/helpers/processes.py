"""The package run as a subprocess, as a user runs it: the simulator on 127.0.0.1 (`SimProcess`; the `sim` fixture
of tests/conftest.py starts and stops them) and the CLI (`regen`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx

from tests.helpers.paths import ROOT


class SimProcess:
    def __init__(self, args: list[str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.sim", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("http://127.0.0.1:"):
            self.proc.kill()
            raise RuntimeError(
                f"simulator did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.url = line

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/_sim/stats", timeout=10).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def regen(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
