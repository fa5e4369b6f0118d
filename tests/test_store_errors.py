"""The store's own errors: a file in the way, a read-only run directory, a disk that fills (both failures injected
without mounting, so the tests run on every machine)."""

from __future__ import annotations

import builtins
import errno
import io
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline.errors import OutputError
from pipeline.store import RunStore
from pipeline.store import synthetic as syn
from tests.helpers.paths import ROOT


def _store(run_dir: Path) -> RunStore:
    return RunStore(run_dir, worker_index=0, num_workers=1, keep_fields=(), shard_rows=20, row_group_rows=4)


def _read_all(run_dir: Path) -> list[str]:
    ids: list[str] = []
    for sub in ("shards", "rejects"):
        for path in (run_dir / sub).glob("*.parquet"):
            ids += pq.read_table(path).column("id").to_pylist()
    return ids


def test_a_file_where_the_run_dir_should_be_is_a_clear_error(tmp_path):
    (tmp_path / "run").write_text("not a directory")
    with pytest.raises(OutputError, match=r"cannot create the run directory .*run"):
        _store(tmp_path / "run").open()


def test_a_file_where_shards_should_be_is_a_clear_error(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "shards").write_text("in the way")
    with pytest.raises(OutputError, match="shards"):
        _store(tmp_path / "run").open()


@contextmanager
def _read_only(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`root` as on a file system mounted read-only, without mounting (which needs privileges CI may lack, and
    root ignores file modes): every call that would change something under it fails with EROFS, as the kernel's
    would; reads, and a mkdir of what exists (EEXIST first, as Linux checks), go through."""
    real_open, real_io_open, real_mkdir = os.open, io.open, os.mkdir

    def inside(path: object) -> bool:
        return isinstance(path, (str, os.PathLike)) and Path(os.fspath(path)).absolute().is_relative_to(root)

    def refuse(path: Any) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def os_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        if inside(path) and flags & writes:
            raise refuse(path)
        return real_open(path, flags, *args, **kw)

    def io_open(file: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
        if inside(file) and set(mode) & set("wax+"):
            raise refuse(file)
        return real_io_open(file, mode, *args, **kw)

    def mkdir(path: Any, *args: Any, **kw: Any) -> None:
        if inside(path):
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(path))
            raise refuse(path)
        real_mkdir(path, *args, **kw)

    def changes(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*paths: Any, **kw: Any) -> Any:
            for path in paths:
                if inside(path):
                    raise refuse(path)
            return real(*paths, **kw)

        return call

    with monkeypatch.context() as m:
        m.setattr(os, "open", os_open)
        m.setattr(io, "open", io_open)
        m.setattr(builtins, "open", io_open)
        m.setattr(os, "mkdir", mkdir)
        for name in ("replace", "rename", "unlink", "remove", "rmdir"):
            m.setattr(os, name, changes(getattr(os, name)))
        yield


def test_read_only_run_dir_is_refused_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    store.add_accepted(syn.accepted("a"))
    store.close()
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    with _read_only(run, monkeypatch):
        with pytest.raises(OutputError, match="read-only file system") as info:
            _store(run).open()
        assert str(run) in str(info.value)
        assert _read_all(run) == ["a"]
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before


# A worker whose disk fills: a write past the limit fails with EFBIG (RLIMIT_FSIZE, SIGXFSZ ignored), the same
# failed write(2) a full disk gives, in any process, without a tmpfs to mount. The limit is per file, so after two
# committed shards of 7 KB rows one 1.2 MB row is what no longer fits. The writer reports each sync.
FILLING = textwrap.dedent(
    """
    import resource
    import signal
    import sys
    from pathlib import Path
    from pipeline.errors import OutputError

    disk = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (disk, disk))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
    from pipeline.store import RunStore
    from pipeline.store import synthetic as syn

    run = Path(sys.argv[1])
    store = RunStore(run, worker_index=0, num_workers=1, keep_fields=(), shard_rows=20, row_group_rows=4)
    store.open()
    try:
        for i in range(100):
            store.add_accepted(syn.accepted(f"p{i}", text_bytes=1_200_000 if i == 47 else 7000))
            if i % 5 == 4:
                store.sync_blocking()
                print("synced", i + 1, flush=True)
    except OutputError as exc:
        print("error", exc, flush=True)
    try:
        store.sync_blocking()
    except OutputError as exc:
        print("again", exc, flush=True)
    store.close()
    """
)
DISK = 1_000_000


def test_full_disk_stops_with_a_clear_error_and_resumes_once_space_is_free(tmp_path: Path) -> None:
    run = tmp_path / "run"
    child = subprocess.run(
        [sys.executable, "-c", FILLING, str(run), str(DISK)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    errors = [line for line in lines if line.startswith("error ")]
    assert len(errors) == 1 and "file too large" in errors[0] and str(run) in errors[0], lines[-3:]
    assert any(line.startswith("again ") and "earlier error" in line for line in lines), lines[-3:]
    counts = [int(line.split()[1]) for line in lines if line.startswith("synced ")]
    synced = [f"p{j}" for j in range(max(counts, default=0))]
    assert len(synced) == 45  # the syncs before the one that failed
    assert len(_read_all(run)) == 40  # two shards committed
    assert set(_read_all(run)) <= set(synced)  # every committed file reads

    again = _store(run)  # space is free again: a process without the limit
    state = again.open()
    again.close()
    ids = _read_all(run)
    assert len(ids) == len(set(ids))
    assert set(synced) <= set(ids)  # every synced row survived in the journal
    assert state.accepted == len(ids)
