"""Worker heartbeats: which `regen run` processes are alive in a RUN_DIR, for `regen status`.

Each worker rewrites `RUN_DIR/heartbeats/worker-{i}.json` about every second while it runs (`{worker, host, pid,
t, started, state}`, replaced atomically) and once more when it ends (`state` "finished" or "interrupted"). A
reader judges each beat with `liveness`: a worker that said it ended is not live; one on this host whose pid no
longer exists is dead at once (a SIGKILL leaves its last beat "running"); one on another host is dead when its
beat is older than `STALE_S` (a shared filesystem gives no better signal). Beats are not durable data: no fsync,
and a torn or missing file only means "unknown".
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .layout import HEARTBEATS

STALE_S = 15.0  # a beat older than this (about 15 missed beats) is a dead worker on another host
RUNNING = "running"


@dataclass(frozen=True)
class Beat:
    worker: int
    host: str
    pid: int
    t: float
    started: float
    state: str

    def liveness(self, now: float, host: str | None = None) -> tuple[bool, str]:
        """Whether the worker is alive at `now`, and why not (or "running")."""
        if self.state != RUNNING:
            return False, self.state
        if self.host == (host or socket.gethostname()) and not _pid_alive(self.pid):
            return False, f"process {self.pid} is gone"
        if now - self.t > STALE_S:
            return False, f"no heartbeat for {now - self.t:.0f}s"
        return True, RUNNING


def path_of(run_dir: Path, worker: int) -> Path:
    return run_dir / HEARTBEATS / f"worker-{worker}.json"


def beat(run_dir: Path, worker: int, started: float, state: str = RUNNING) -> None:
    """Write this process's heartbeat for `worker` (atomically: a reader sees the old beat or the new one)."""
    path = path_of(run_dir, worker)
    path.parent.mkdir(exist_ok=True)
    data = {"worker": worker, "host": socket.gethostname(), "pid": os.getpid(), "t": time.time(),
            "started": started, "state": state}  # fmt: skip
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(data))
    os.replace(tmp, path)


def read_beats(run_dir: Path) -> dict[int, Beat]:
    """Every worker's last heartbeat, by worker index (unreadable files are left out)."""
    beats: dict[int, Beat] = {}
    folder = run_dir / HEARTBEATS
    for path in sorted(folder.glob("worker-*.json")) if folder.is_dir() else ():
        try:
            raw: Any = orjson.loads(path.read_bytes())
            b = Beat(int(raw["worker"]), str(raw["host"]), int(raw["pid"]), float(raw["t"]), float(raw["started"]),
                     str(raw["state"]))  # fmt: skip
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
        beats[b.worker] = b
    return beats


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
