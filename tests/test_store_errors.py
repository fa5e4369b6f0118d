import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.errors import OutputError
from pipeline.store import RunStore
from pipeline.store import synthetic as syn


def _store(run_dir: Path) -> RunStore:
    return RunStore(run_dir, worker_index=0, num_workers=1, keep_fields=(), shard_rows=20, row_group_rows=4)


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here: {result.stderr.strip()}")


@contextmanager
def _mounted(target: Path, *args: str) -> Iterator[Path]:
    target.mkdir(parents=True, exist_ok=True)
    _mount(*args, str(target))
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)


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


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_read_only_run_dir_is_refused_with_the_reason(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    store.add_accepted(syn.accepted("a"))
    store.close()
    with _mounted(run, "--bind", str(run)):
        _mount("-o", "remount,bind,ro", str(run))
        with pytest.raises(OutputError, match="read-only file system"):
            _store(run).open()
        assert _read_all(run) == ["a"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_full_disk_stops_with_a_clear_error_and_resumes_once_space_is_free(tmp_path):
    with _mounted(tmp_path / "disk", "-t", "tmpfs", "-o", "size=2m", "tmpfs") as disk:
        ballast = disk / "ballast"
        ballast.write_bytes(os.urandom(1_400_000))
        run = disk / "run"
        store = _store(run)
        store.open()
        synced: list[str] = []
        with pytest.raises(OutputError, match="no space left on device") as info:
            for i in range(10_000):
                store.add_accepted(syn.accepted(f"p{i}", text_bytes=7000))
                if i % 5 == 4:
                    store.sync_blocking()
                    synced = [f"p{j}" for j in range(i + 1)]
        assert str(run) in str(info.value)
        with pytest.raises(OutputError, match="earlier error"):
            store.sync_blocking()
        store.close()  # releases the lock; commits nothing more
        assert len(synced) >= 20
        assert set(_read_all(run)) <= set(synced)  # every committed file reads

        ballast.unlink()
        again = _store(run)
        state = again.open()
        again.close()
        ids = _read_all(run)
        assert len(ids) == len(set(ids))
        assert set(synced) <= set(ids)  # every synced row survived in the journal
        assert state.accepted == len(ids)
