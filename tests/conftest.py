"""Shared fixtures: a real simulator subprocess on 127.0.0.1, helpers to read a RUN_DIR, and an in-memory Sink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
# The real test data beside the repository (datasets/, traces/): CI has it; a user's clone may not.
# REGEN_SHARED points elsewhere (set it to a missing folder to see what a clone without it runs).
SHARED = Path(os.environ.get("REGEN_SHARED") or ROOT.parent / "shared")


def needs_shared(*parts: str) -> pytest.MarkDecorator:
    """Skip, saying what is missing, where ../shared/<parts> is absent; never in CI (CI=true), where it must be."""
    path = SHARED.joinpath(*parts)
    missing = not path.exists() and not os.environ.get("CI")
    return pytest.mark.skipif(missing, reason=f"{path} is absent: these tests read the real data there (CI has it)")


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


@pytest.fixture
def sim() -> Iterator[Callable[..., SimProcess]]:
    started: list[SimProcess] = []

    def start(*args: str) -> SimProcess:
        proc = SimProcess(list(args))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


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


def committed_ids(run_dir: Path, sub: str) -> list[str]:
    ids: list[str] = []
    for path in sorted((run_dir / sub).glob("*.parquet")):
        ids.extend(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    return ids


def read_rows(run_dir: Path, sub: str) -> list[dict]:
    rows: list[dict] = []
    for path in sorted((run_dir / sub).glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


class MemorySink:
    """The dispatcher's Sink protocol, in memory: every call is kept in order."""

    def __init__(self) -> None:
        self.accepted: list[dict[str, Any]] = []
        self.rejected: list[dict[str, Any]] = []

    def add_accepted(self, row: dict[str, Any]) -> None:
        self.accepted.append(row)

    def add_rejected(self, row: dict[str, Any]) -> None:
        self.rejected.append(row)

    @property
    def ids(self) -> list[str]:
        return [r["id"] for r in self.accepted + self.rejected]
