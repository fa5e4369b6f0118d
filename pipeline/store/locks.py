"""Worker locks: one live process per worker index, and one rewriter of committed files at a time.

`fcntl.flock` on `RUN_DIR/locks/worker-{i}.lock`: the kernel drops it when the holder dies, however it dies, so
there is no stale-lock cleanup. The holder writes its pid and host into the file so a refused process can say who
holds it. (On a shared filesystem, flock must be supported across nodes: NFSv4 and Lustre mounted with `flock`.)
Lock files are never deleted: deleting a lock file while another process waits on it would let two hold it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson

from ..errors import LockedError
from .durable import output_errors
from .layout import LOCKS, RunLayout


def worker_lock_path(run_dir: Path, worker: int) -> Path:
    return RunLayout(run_dir).worker_lock(worker)


def rewrite_lock_path(run_dir: Path) -> Path:
    return run_dir / LOCKS / "rewrite.lock"


class FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, blocking: bool = False, role: str = "worker", **note: Any) -> bool:
        """Take the lock; False if another process holds it (only when not blocking). `role` is recorded
        for whoever is refused: "worker" holds it for a run, "recovering" only while recovering a journal."""
        if self._fd is not None:
            return True
        with output_errors(self.path, "open the lock file"):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            with output_errors(self.path, "lock"):
                raise exc
        self._fd = fd
        self._write_owner(fd, {"role": role, **note})
        return True

    def is_free(self) -> bool:
        """Whether nobody holds the lock right now (takes and drops it without writing a note)."""
        if self._fd is not None:
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor drops the flock

    def note(self) -> dict[str, Any]:
        """What the holder recorded in the lock file (may be stale for a moment after a new holder took it)."""
        try:
            info = orjson.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def holder(self) -> str:
        """Who holds the lock, as recorded in the lock file by its holder."""
        info = self.note()
        try:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["since"]))
            return f"pid {info['pid']} on host {info['host']} (since {since})"
        except (KeyError, TypeError, ValueError, OverflowError):
            return "an unknown process"

    def _write_owner(self, fd: int, note: dict[str, Any]) -> None:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), **note}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, orjson.dumps(info), 0)
        except OSError:
            pass  # the lock holds without the note; only the refusal message gets vaguer

    def __enter__(self) -> FileLock:
        self.acquire(blocking=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take_worker_lock(
    run_dir: Path,
    worker: int,
    num_workers: int = 0,
    *,
    patience_s: float = 2.0,
    recovery_wait_s: float = 600.0,
) -> FileLock:
    """This worker's lock, or LockedError naming its holder.

    A peer may hold it for a moment to recover this index's orphan journal (workers started together all look
    for orphans): then wait for it. A holder that is not recovering is refused after `patience_s`, the time a
    new holder has to record its role.
    """
    lock = FileLock(worker_lock_path(run_dir, worker))
    start = time.monotonic()
    while not lock.acquire(num_workers=num_workers):
        waited = time.monotonic() - start
        recovering = lock.note().get("role") == "recovering"
        if waited > (recovery_wait_s if recovering else patience_s):
            raise LockedError(
                f"worker {worker} of {run_dir} is already running: lock {lock.path} is held by {lock.holder()}. "
                "Stop that process or use another --worker-index"
            )
        time.sleep(0.05)
    return lock


def check_peers(run_dir: Path, worker: int, num_workers: int) -> None:
    """Refuse to run beside a live worker that partitions the ids differently: both would own some ids."""
    for path in sorted((run_dir / LOCKS).glob("worker-*.lock")):
        lock = FileLock(path)
        if path == worker_lock_path(run_dir, worker) or lock.is_free():
            continue
        note = lock.note()
        theirs = note.get("num_workers")
        if note.get("role") == "worker" and isinstance(theirs, int) and theirs not in (0, num_workers):
            raise LockedError(
                f"{path.stem} of {run_dir} is running with --num-workers {theirs} ({lock.holder()}); this "
                f"process has --num-workers {num_workers}. All live workers of a run must agree: stop the "
                "old ones first"
            )


def rewrite_lock(run_dir: Path) -> FileLock:
    """The lock every rewriter of committed files holds (recovery's settling, merge, quarantine); blocking."""
    (run_dir / LOCKS).mkdir(parents=True, exist_ok=True)
    return FileLock(rewrite_lock_path(run_dir))


@contextmanager
def whole_run(run_dir: Path, what: str) -> Iterator[None]:
    """Hold the rewrite lock and every worker lock without waiting: no run and no other rewriter is live.

    LockedError names the holder. `what` says what the caller is about to do, for that message.
    """
    locks = run_dir / LOCKS
    with ExitStack() as stack:
        held: set[Path] = set()
        stack.enter_context(_taken(FileLock(rewrite_lock_path(run_dir)), what))
        # A worker may create its lock file while we take the others: look again until none is new.
        while new := set(locks.glob("worker-*.lock")) - held:
            for path in sorted(new):
                stack.enter_context(_taken(FileLock(path), what))
            held |= new
        yield


@contextmanager
def _taken(lock: FileLock, what: str) -> Iterator[FileLock]:
    lock.path.parent.mkdir(parents=True, exist_ok=True)
    if not lock.acquire(role=what):
        raise LockedError(
            f"{lock.path.parent.parent} is in use: {lock.path.name} is held by {lock.holder()}. "
            f"Wait for the run (or other {what}) to finish or stop it, then {what}"
        )
    try:
        yield lock
    finally:
        lock.release()
