"""Worker heartbeats: which `regen run` processes are alive in a RUN_DIR, for `regen status`.

Each worker rewrites `RUN_DIR/heartbeats/worker-{i}.json` about every second while it runs (`{worker, host, pid,
t, started, state}`, replaced atomically) and once more when it ends (`state` "finished" or "interrupted"). A
reader judges each beat with `liveness`: a worker that said it ended is not live; one on this host whose pid no
longer exists is dead at once (a SIGKILL leaves its last beat "running"); one on another host is dead when its
beat is older than `STALE_S` (a shared filesystem gives no better signal). Beats are not durable data: no fsync,
and a torn or missing file only means "unknown".

A run in a bucket has no shared folder: a reader on another node sees no beat of those files. There the worker's
lease (store/lease.py) is the heartbeat, at no extra object-store call: it names the holder's host and pid, and is
rewritten every `lease_s/3`. `from_lease` reads it as a beat whose age is the time since its last renewal and which
goes stale when the lease expires (`lease_s` after that renewal), the very moment another process may take over the
worker index. A released lease is a worker that ended.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from .layout import HEARTBEATS

INTERVAL_S = 1.0  # a running worker beats about this often
STALE_S = 15.0  # a beat older than this (about 15 missed beats) is a dead worker on another host
RUNNING = "running"
RELEASED = "released"  # a bucket worker that ended and let its lease go (finished, interrupted or stopped)


@dataclass(frozen=True)
class Beat:
    worker: int
    host: str
    pid: int
    t: float
    started: float
    state: str
    expires: float | None = None  # a lease's expiry (a bucket run); None: stale STALE_S after `t`

    def liveness(self, now: float, host: str | None = None) -> tuple[bool, str]:
        """Whether the worker is alive at `now`, and why not (or "running")."""
        if self.state != RUNNING:
            return False, self.state
        if self.host == (host or socket.gethostname()) and not _pid_alive(self.pid):
            return False, f"process {self.pid} is gone"
        if self.expires is None and now - self.t > STALE_S:
            return False, f"no heartbeat for {now - self.t:.0f}s"
        if self.expires is not None and now > self.expires:
            return False, f"lease not renewed for {now - self.t:.0f}s"
        return True, RUNNING


def path_of(run_dir: Path, worker: int) -> Path:
    return run_dir / HEARTBEATS / f"worker-{worker}.json"


def beat(run_dir: Path, worker: int, started: float, state: str = RUNNING) -> None:
    """Write this process's heartbeat for `worker` (atomically: a reader sees the old beat or the new one). Each
    thread writes its own temporary file, so a periodic beat still in flight when the worker writes its last one
    cannot take the other's file from under it."""
    path = path_of(run_dir, worker)
    path.parent.mkdir(exist_ok=True)
    data = {"worker": worker, "host": socket.gethostname(), "pid": os.getpid(), "t": time.time(),
            "started": started, "state": state}  # fmt: skip
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(orjson.dumps(data))
    os.replace(tmp, path)


async def keep_beating(run_dir: Path, worker: int, started: float, interval_s: float = INTERVAL_S) -> None:
    """This worker is alive (`regen status` tells a dead run from a slow one): a beat about every `interval_s`,
    written off the event loop, until cancelled. Cancelled, it returns only once the beat being written is on disk,
    so the worker's last beat ("finished", "interrupted"), written after it, is never overwritten by a "running"
    one (cancelling a task does not stop its thread)."""
    while True:
        writing = asyncio.ensure_future(asyncio.to_thread(beat, run_dir, worker, started))
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError:
            await asyncio.wait([writing])
            raise
        await asyncio.sleep(interval_s)


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


def from_lease(worker: int, holder: dict[str, Any], local: Beat | None = None) -> Beat:
    """The beat a bucket worker's lease note stands for (`holder`, as lease.py writes it). A lease held for another
    role (`recovering`: a live worker replaying this dead one's journal) is not this worker running. `local`, this
    node's own beat of the worker, names how the same process ended (finished, interrupted) when it released."""
    since = _number(holder.get("since"))
    state = RELEASED if holder.get("released") else str(holder.get("role") or "worker")
    state = RUNNING if state == "worker" else state
    beat = Beat(worker, str(holder.get("host") or "?"), int(_number(holder.get("pid"))), since,
                _number(holder.get("taken", since)), state, _number(holder.get("expires")))  # fmt: skip
    if state != RELEASED or local is None or local.state == RUNNING:
        return beat
    return replace(beat, state=local.state) if (local.host, local.pid) == (beat.host, beat.pid) else beat


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
