"""Durable file operations for the store, and the one place OS errors become `OutputError`.

A commit is only as good as its fsyncs: the file's data before the rename, the directory entry after it. Every
write path of the store goes through `output_errors`, so a full disk or a read-only RUN_DIR stops the run with a
message naming the path and what was being done, instead of a bare `OSError` from deep inside pyarrow.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError

_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large",
    errno.ENOTDIR: "a path component is a file, not a directory",
    errno.EEXIST: "a file is in the way",
}


def describe(exc: OSError, path: Path | str, action: str) -> str:
    reason = _REASONS.get(exc.errno or 0) or exc.strerror or str(exc)
    where = exc.filename or path
    return (
        f"cannot {action} {where}: {reason}. Committed files are intact; "
        "free space or fix permissions and rerun to resume"
    )


@contextmanager
def output_errors(path: Path | str, action: str) -> Iterator[None]:
    """Translate any OSError raised inside the block to OutputError(path, action)."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(describe(exc, path, action)) from exc


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make renames and unlinks in `path` durable (a directory fsync persists its entries)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_quiet(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
