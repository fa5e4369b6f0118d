import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.errors import LockedError
from pipeline.store import RunStore, id_hash, owns
from pipeline.store import synthetic as syn
from pipeline.store.locks import FileLock, take_worker_lock, worker_lock_path

IDS = [f"p{i}" for i in range(300)]


def _store(run_dir: Path, worker: int, workers: int) -> RunStore:
    return RunStore(run_dir, worker_index=worker, num_workers=workers, keep_fields=(), shard_rows=40, row_group_rows=8)


def _counts(run_dir: Path) -> Counter[str]:
    ids: list[str] = []
    for sub in ("shards", "rejects"):
        for path in (run_dir / sub).glob("*.parquet"):
            ids += pq.read_table(path).column("id").to_pylist()
    return Counter(ids)


def _crash_midway(run_dir: Path, workers: int) -> None:
    """All workers run at once, do part of their share, sync some of it, then die without closing."""
    stores = [_store(run_dir, w, workers) for w in range(workers)]
    for store in stores:
        store.open()
    for w, store in enumerate(stores):
        mine = [i for i in IDS if owns(id_hash(i), w, workers)]
        for n, i in enumerate(mine[: len(mine) * 2 // 3]):
            (store.add_rejected(syn.rejected(i)) if n % 9 == 0 else store.add_accepted(syn.accepted(i)))
        store.sync_blocking()
        store.add_accepted(syn.accepted(mine[-1]))  # never synced: lost, and redone by the next run
    for store in stores:
        store.abort()


def _finish(run_dir: Path, workers: int) -> None:
    stores = [_store(run_dir, w, workers) for w in range(workers)]
    states = [s.open() for s in stores]  # all open at once: each recovers whatever journals are free
    for w, (store, state) in enumerate(zip(stores, states, strict=True)):
        for i in IDS:
            if owns(id_hash(i), w, workers) and id_hash(i) not in state.done:
                store.add_accepted(syn.accepted(i))
        store.close()


@pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 3), (1, 4), (4, 1)], ids=["3to2", "2to3", "1to4", "4to1"])
def test_changing_the_worker_count_loses_and_duplicates_nothing(tmp_path, before, after):
    run = tmp_path / "run"
    _crash_midway(run, before)
    assert len(list((run / "journal").iterdir())) == before
    _finish(run, after)
    counts = _counts(run)
    assert [i for i, n in counts.items() if n > 1] == []
    assert set(counts) == set(IDS)
    assert list((run / "journal").iterdir()) == []


def test_orphan_journal_of_a_live_worker_is_left_alone(tmp_path):
    run = tmp_path / "run"
    live = _store(run, 1, 2)
    live.open()
    live.add_accepted(syn.accepted("held"))
    live.sync_blocking()
    other = _store(run, 0, 2)
    state = other.open()
    assert id_hash("held") in state.done  # journal rows of a live worker count as done
    assert (run / "journal" / "worker-1.0.jsonl").exists()
    other.close()
    live.close()
    assert _counts(run) == Counter({"held": 1})


LOCKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pipeline.store import RunStore
    store = RunStore(Path(sys.argv[1]), worker_index=0, num_workers=2, keep_fields=())
    store.open()
    print("locked", flush=True)
    sys.stdin.read()
    store.close()
    """
)


def test_second_process_on_the_same_worker_index_is_refused(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        with pytest.raises(LockedError, match=rf"worker 0 .* pid {proc.pid} on host") as info:
            _store(run, 0, 2).open()
        assert info.value.exit_code == 4
        other = _store(run, 1, 2)  # another index is free
        other.open()
        other.close()
    finally:
        proc.communicate("", timeout=30)
    assert proc.returncode == 0
    again = _store(run, 0, 2)  # the lock died with its holder
    again.open()
    again.close()


def test_a_peer_recovering_this_index_is_waited_for_not_refused(tmp_path):
    (tmp_path / "locks").mkdir()
    peer = FileLock(worker_lock_path(tmp_path, 1))
    assert peer.acquire(role="recovering")
    threading.Timer(0.3, peer.release).start()
    mine = take_worker_lock(tmp_path, 1, patience_s=0.1)
    assert mine.held
    mine.release()

    live = FileLock(worker_lock_path(tmp_path, 1))
    assert live.acquire(role="worker")
    with pytest.raises(LockedError, match="is already running"):
        take_worker_lock(tmp_path, 1, patience_s=0.1)
    live.release()


def test_a_live_worker_with_another_worker_count_is_refused(tmp_path):
    run = tmp_path / "run"
    old = _store(run, 2, 3)
    old.open()
    with pytest.raises(LockedError, match="--num-workers 3"):
        _store(run, 0, 2).open()
    same = _store(run, 0, 3)
    same.open()
    same.close()
    old.close()
    new = _store(run, 0, 2)  # once the old worker is gone, the new count is fine
    new.open()
    new.close()
