"""Runs in a bucket (store/remote.py, commitlog.py, lease.py, objects.py) against a real S3 server on 127.0.0.1."""

from __future__ import annotations

import io
import random
import shutil
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import ConfigError, InputError, LockedError, OutputError
from pipeline.store import RunStore, commitlog
from pipeline.store import synthetic as syn
from pipeline.store.objects import WRITER_MARK, S3Objects, parse_uri, uri_text
from pipeline.store.remote import local_copy, prepare_output
from tests.helpers.exactly_once import committed
from tests.objectstore import BUCKET, S3Server, serve_s3
from tests.store_writers import Writer, announced, outcome

URI = f"s3://{BUCKET}/runs/r1"


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    yield from serve_s3(tmp_path, monkeypatch)


def _store(run_dir: Path, worker: int = 0, workers: int = 1) -> RunStore:
    return RunStore(run_dir, worker_index=worker, num_workers=workers, keep_fields=(), shard_rows=40, row_group_rows=8)


def _write(run_dir: Path, ids: list[str]) -> None:
    store = _store(run_dir)
    store.open()
    for i, pid in enumerate(ids):
        store.add_accepted(syn.accepted(pid)) if i % 5 else store.add_rejected(syn.rejected(pid))
        if i % 7 == 6:
            store.sync_blocking()
    store.close()


def _fresh_view(s3: S3Server, tmp_path: Path, name: str) -> Path:
    """What a reader on another node sees: a working copy made from the bucket alone."""
    return local_copy(URI, journal_dir=str(tmp_path / name))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("s3://b/x", "s3://b/x"), ("runs/x", None), ("file:///tmp/x", None), (Path("s3://b/x"), "s3://b/x")],
    ids=["uri", "path", "file-uri", "argparse-path"],
)
def test_uri_text(text: str | Path, expected: str | None) -> None:
    assert uri_text(text) == expected


def test_credentials_in_the_uri_are_refused() -> None:
    with pytest.raises(ConfigError, match="credentials"):
        parse_uri("s3://AKIA:secret@bucket/run")


def test_a_run_round_trips_through_the_bucket(s3: S3Server, tmp_path: Path) -> None:
    run_dir = prepare_output(URI)
    ids = [f"p{i}" for i in range(150)]
    _write(run_dir, ids)
    view = _fresh_view(s3, tmp_path, "other-node")
    assert view != run_dir
    assert sorted(committed(view)) == sorted(ids) and max(committed(view).values()) == 1
    keys = s3.keys("runs/r1/")
    assert "runs/r1/_regen/log/000000000000.json" in keys
    parts = [k for k in keys if k.endswith(".parquet")]
    assert sorted(k.rsplit("/", 1)[1] for k in parts) == sorted(
        p.name for sub in ("shards", "rejects") for p in (view / sub).glob("*.parquet")
    )


def test_missing_bucket_is_an_output_error_naming_the_uri(s3: S3Server) -> None:
    with pytest.raises(OutputError, match=r"s3://no-such-bucket/run.*does not exist"):
        prepare_output("s3://no-such-bucket/run")


def test_commit_log_lets_one_writer_take_each_record(s3: S3Server) -> None:
    objects = S3Objects(parse_uri(URI))
    a, b = commitlog.Log(), commitlog.Log()
    commitlog.commit(objects, a, {"shards/x.parquet": {"rows": 1, "size": 1}}, [])
    commitlog.commit(objects, b, {"shards/y.parquet": {"rows": 1, "size": 1}}, [])  # loses record 0, takes 1
    assert b.n == 1 and set(b.parts) == {"shards/x.parquet", "shards/y.parquet"}
    commitlog.commit(objects, a, {"shards/x2.parquet": {"rows": 1, "size": 1}}, ["shards/x.parquet"])
    with pytest.raises(commitlog.CommitConflict, match=r"shards/x\.parquet"):  # b's view is stale: x is gone
        commitlog.commit(objects, b, {"shards/x3.parquet": {"rows": 1, "size": 1}}, ["shards/x.parquet"])
    replay = commitlog.catch_up(objects, commitlog.Log())
    assert set(replay.parts) == {"shards/x2.parquet", "shards/y.parquet"}


def _orphan(s3: S3Server, name: str) -> None:
    table = pa.table({"id": ["orphan-1", "orphan-2"]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    # an upload of regen's carries its mark (objects.WRITER_MARK): only those are ever cleaned up
    s3.client().put_object(Bucket=BUCKET, Key=f"runs/r1/shards/{name}", Body=sink.getvalue(), Metadata=WRITER_MARK)


def test_orphan_uploads_are_invisible_and_cleaned_by_their_worker(s3: S3Server, tmp_path: Path) -> None:
    run_dir = prepare_output(URI)
    _write(run_dir, [f"p{i}" for i in range(50)])
    _orphan(s3, "part-w0-00077-0badc0de.parquet")  # an upload whose commit record was never written
    _orphan(s3, "part-w1-00003-0badc0de.parquet")  # worker 1's: maybe a live upload, kept until it is old
    view = _fresh_view(s3, tmp_path, "reader")
    assert "orphan-1" not in committed(view)
    store = _store(prepare_output(URI))
    store.open()
    store.close()
    names = [k.rsplit("/", 1)[1] for k in s3.keys("runs/r1/shards/")]
    assert "part-w0-00077-0badc0de.parquet" not in names
    assert "part-w1-00003-0badc0de.parquet" in names


def test_a_second_process_on_another_node_is_refused_by_the_lease(s3: S3Server, tmp_path: Path) -> None:
    first = _store(prepare_output(URI, journal_dir=str(tmp_path / "node-a")))
    first.open()
    try:
        second = _store(prepare_output(URI, journal_dir=str(tmp_path / "node-b")))
        with pytest.raises(LockedError, match="lease is held by pid"):
            second.open()
        other_worker = _store(prepare_output(URI, journal_dir=str(tmp_path / "node-b")), worker=1, workers=2)
        other_worker.open()
        other_worker.close()
    finally:
        first.close()
    again = _store(prepare_output(URI, journal_dir=str(tmp_path / "node-b")))
    again.open()  # released on close: no need to wait for the expiry
    again.close()


def test_rewrites_reach_the_bucket_as_one_record(s3: S3Server, tmp_path: Path) -> None:
    """Settling duplicates rewrites a part: other nodes see the rewritten part, never both versions."""
    run_dir = prepare_output(URI)
    _write(run_dir, [f"p{i}" for i in range(40)])
    part = next((run_dir / "shards").glob("*.parquet"))
    dup = part.with_name("part-w0-00050-dddddddd.parquet")
    shutil.copy(part, dup)  # a crash-made duplicate: settle keeps one copy of each id
    store = _store(run_dir)
    store.open()
    store.close()
    view = _fresh_view(s3, tmp_path, "reader")
    assert max(committed(view).values()) == 1
    assert sorted(committed(view)) == sorted(f"p{i}" for i in range(40))


WRITER = textwrap.dedent(
    """
    import random, sys, time
    from pipeline.store import RunStore
    from pipeline.store.remote import prepare_output
    from tests.store_writers import add_row, close, sync, todo

    uri = sys.argv[1]
    total, seed, worker, workers, shard_rows = (int(a) for a in (sys.argv[2:6] + sys.argv[7:8]))
    sync_s, pause = float(sys.argv[6]), float(sys.argv[8])
    rng = random.Random(seed)
    run_dir = prepare_output(uri, remote_sync_s=sync_s, lease_s=5)
    store = RunStore(run_dir, worker_index=worker, num_workers=workers, keep_fields=(), shard_rows=shard_rows,
                     row_group_rows=8)
    state = store.open()
    print("open", state.accepted, flush=True)
    batch = []
    for pid in todo(state, total, worker, workers):
        add_row(store, pid, rng)
        batch.append(pid)
        time.sleep(pause)  # generation time
        if len(batch) >= rng.randrange(1, 25):
            sync(store, batch)
            batch = []
    close(store, batch)
    """
)


def _writers(
    total: int, seed: int, kill_after: list[float | None], sync_s: float = 60.0, shard_rows: int = 40, pause: float = 0
) -> tuple[set[str], int, set[str]]:
    """One writer process per entry of `kill_after`, all at once; an entry SIGKILLs its writer that many seconds
    after it opened the store (None: it finishes). Returns the ids they reported synced, how many finished, and the
    ids they announced before a sync (the synced ones and any batch a kill cut off mid-sync)."""
    workers = len(kill_after)
    writers = [
        Writer(WRITER, (URI, total, seed * 10 + w, w, workers, sync_s, shard_rows, pause)) for w in range(workers)
    ]
    for writer, delay in zip(writers, kill_after, strict=True):
        assert writer.opened.wait(60), "writer did not open"
        if delay is not None:
            writer.kill_in(delay)
    for writer in writers:
        writer.finish(timeout=120)
    return (*outcome(writers), announced(writers))


def test_repeated_sigkill_in_a_bucket_run_loses_nothing_synced(s3: S3Server, tmp_path: Path) -> None:
    total, rng = 4000, random.Random(7)
    synced_ever: set[str] = set()
    kills = 0
    for round, workers in enumerate([1, 2, 1, 2]):  # the worker count changes between rounds
        synced, finished, _ = _writers(total, round, [rng.uniform(0.2, 0.8) for _ in range(workers)])
        synced_ever |= synced
        kills += workers - finished
        try:
            view = _fresh_view(s3, tmp_path, f"reader-{round}")  # what another node sees: never a duplicate
        except InputError:  # killed before its first commit
            continue
        assert [pid for pid, n in committed(view).items() if n > 1] == []
    assert kills >= 3
    _, finished, _ = _writers(total, 99, [None, None])
    assert finished == 2
    view = _fresh_view(s3, tmp_path, "final")
    counts = committed(view)
    assert [pid for pid, n in counts.items() if n > 1] == []
    assert synced_ever <= set(counts) and set(counts) == {f"p{i}" for i in range(total)}


def test_a_lost_node_costs_at_most_remote_sync_s(s3: S3Server, tmp_path: Path) -> None:
    """The node's working copy (journal included) is deleted after a SIGKILL: only rows synced in the last
    remote_sync_s are lost, the rest were committed to the bucket."""
    total, sync_s = 100000, 0.5
    start = time.monotonic()
    synced, finished, tried = _writers(total, 1, [4.0], sync_s=sync_s, shard_rows=100000, pause=0.002)
    elapsed = time.monotonic() - start
    assert finished == 0
    shutil.rmtree(prepare_output(URI))  # the node is gone, its disk with it
    view = _fresh_view(s3, tmp_path, "new-node")
    counts = committed(view)
    lost = synced - set(counts)
    rate = len(synced) / max(elapsed, 1e-3)
    # the bucket holds only rows the writer synced, and at most the batch whose sync the kill cut off (its commit
    # can reach the bucket before the writer reports it)
    assert max(counts.values()) == 1 and set(counts) <= tried
    assert len(set(counts) - synced) < 25, sorted(set(counts) - synced)
    # at most remote_sync_s of rows (plus the commit being uploaded when the node died), measured in rows
    assert len(lost) <= rate * (sync_s + 1.0), (len(lost), rate)
    print(f"node loss: {len(lost)} of {len(synced)} synced rows lost at {rate:.0f} rows/s, remote_sync_s={sync_s}")
