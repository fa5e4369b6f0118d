import asyncio
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.store import RunStore, committed_ids, id_hash, iter_journal_rows
from pipeline.store import synthetic as syn
from tests.helpers import assert_exactly_once, exactly_once


def _store(run_dir: Path, **kw) -> RunStore:
    kw.setdefault("shard_rows", 100)
    kw.setdefault("row_group_rows", 16)
    return RunStore(
        run_dir,
        worker_index=kw.pop("worker_index", 0),
        num_workers=kw.pop("num_workers", 1),
        keep_fields=kw.pop("keep_fields", ()),
        **kw,
    )


def _fill(store: RunStore, ids, reject_every: int = 0) -> None:
    for n, i in enumerate(ids):
        if reject_every and n % reject_every == 0:
            store.add_rejected(syn.rejected(i))
        else:
            store.add_accepted(syn.accepted(i))


def test_rows_commit_in_parts_and_resume_skips_them(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    assert store.open().done.to_array().size == 0
    ids = [f"p{i}" for i in range(250)]
    _fill(store, ids, reject_every=10)
    store.sync_blocking()
    assert len(list((run / "shards").glob("*.parquet"))) == 2  # two full parts of 100 accepted rows
    store.close()
    assert_exactly_once(run, set(ids), exact=True)
    assert list((run / "journal").iterdir()) == []
    assert [p.name for p in (run / "shards").iterdir() if not p.name.endswith(".parquet")] == []

    again = _store(run)
    state = again.open()
    assert (state.accepted, state.rejected) == (225, 25)
    assert all(id_hash(i) in state.done for i in ids)
    assert id_hash("new") not in state.done
    again.close()


def test_parts_are_readable_as_one_dataset_with_the_schema(tmp_path):
    run = tmp_path / "run"
    store = _store(run, keep_fields=("source",))
    store.open()
    row = syn.accepted("a")
    row["source"] = "s1"
    store.add_accepted(row)
    store.add_rejected(syn.bad_input("b"))
    store.close()
    table = pq.read_table(run / "shards")
    assert table.column("source").to_pylist() == ["s1"]
    assert table.schema.field("created_at").type == pa.timestamp("us", tz="UTC")
    rejects = pq.read_table(run / "rejects")
    assert rejects.column("reason").to_pylist() == ["bad_input"]


def test_sync_makes_rows_durable_before_any_commit(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    _fill(store, ["a", "b"])
    asyncio.run(store.sync())
    assert [e.row["id"] for e in iter_journal_rows(run)] == ["a", "b"]
    assert list((run / "shards").glob("*.parquet")) == []
    store.abort()  # a crash: the journal is all there is

    state = _store(run).open()
    assert state.recovered_rows == 2
    assert_exactly_once(run, {"a", "b"}, exact=True)


def test_unsynced_rows_are_lost_but_nothing_else(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    _fill(store, ["a"])
    store.sync_blocking()
    _fill(store, ["b"])
    store.abort()
    _store(run).open()
    assert_exactly_once(run, {"a"}, exact=True)


def test_crash_between_rename_and_rotation_is_deduplicated(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    _fill(store, [f"p{i}" for i in range(30)], reject_every=7)
    store.sync_blocking()
    (journal,) = (run / "journal").iterdir()
    saved = journal.read_bytes()
    store.close()  # commits the parts and deletes the journal
    journal.write_bytes(saved)  # as if the process died right after the renames

    state = _store(run).open()
    assert state.recovered_rows == 0
    assert_exactly_once(run, {f"p{i}" for i in range(30)}, exact=True)
    assert list((run / "journal").iterdir()) == []


def test_crash_between_shard_and_rejects_rename_recovers_the_rejects(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    _fill(store, [f"p{i}" for i in range(20)], reject_every=5)
    store.sync_blocking()
    (journal,) = (run / "journal").iterdir()
    saved = journal.read_bytes()
    store.close()
    journal.write_bytes(saved)
    for part in (run / "rejects").glob("*.parquet"):
        part.unlink()  # the rejects part never made it

    state = _store(run).open()
    assert state.recovered_rows == 4
    assert_exactly_once(run, {f"p{i}" for i in range(20)}, exact=True)


def test_orphan_temp_files_are_removed_and_never_visible(tmp_path):
    run = tmp_path / "run"
    store = _store(run, shard_rows=1000, row_group_rows=8)
    store.open()
    _fill(store, [f"p{i}" for i in range(50)])
    store.sync_blocking()
    tmp = list((run / "shards").glob(".worker-0-*.parquet.tmp"))
    assert len(tmp) == 1
    assert list((run / "shards").glob("*.parquet")) == []
    shutil.copy(tmp[0], tmp_path / "keep")
    store.abort()
    shutil.copy(tmp_path / "keep", tmp[0])  # the crash left it behind

    _store(run).open()
    assert list((run / "shards").glob("*.tmp")) == []
    assert_exactly_once(run, {f"p{i}" for i in range(50)}, exact=True)


def test_memory_stays_flat_while_a_large_shard_fills(tmp_path):
    run = tmp_path / "run"
    store = _store(run, shard_rows=10_000, row_group_rows=512)
    store.open()
    peak_rows = peak_arrow = 0
    for i in range(10_000):
        store.add_accepted(syn.accepted(f"p{i}", text_bytes=7000))
        if store.needs_sync or i % 300 == 0:
            store.sync_blocking()
            peak_rows = max(peak_rows, store.buffered_rows)
            peak_arrow = max(peak_arrow, pa.total_allocated_bytes())
    store.close()
    assert peak_rows < 512
    assert peak_arrow < 16_000_000  # 10,000 x 7 KB = 70 MB would be the whole shard
    (part,) = (run / "shards").glob("*.parquet")
    meta = pq.read_metadata(part)
    assert (meta.num_rows, meta.num_row_groups) == (10_000, 20)


def test_retry_rejects_moves_ids_out_of_rejects(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    _fill(store, [f"p{i}" for i in range(10)], reject_every=2)  # p0 p2 p4 p6 p8 rejected
    store.close()

    retry = _store(run)
    state = retry.open(retry_rejects=True)
    assert id_hash("p0") not in state.done and id_hash("p1") in state.done
    assert len(state.rejected_ids) == 5
    _fill(retry, ["p0", "p2"])  # now accepted
    retry.add_rejected(syn.rejected("p4", reason="truncated"))  # rejected again
    retry.close()

    assert_exactly_once(run, {f"p{i}" for i in range(10)}, exact=True)
    rejects = pq.read_table(run / "rejects")
    reasons = dict(zip(rejects.column("id").to_pylist(), rejects.column("reason").to_pylist(), strict=True))
    assert reasons == {"p4": "truncated", "p6": "empty_answer", "p8": "empty_answer"}


def test_crash_after_retry_commit_before_rejects_rewrite_is_settled(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    _fill(store, ["a", "b", "c"], reject_every=1)
    store.close()
    saved = {p: p.read_bytes() for p in (run / "rejects").glob("*.parquet")}

    retry = _store(run)
    retry.open(retry_rejects=True)
    _fill(retry, ["a"])
    retry.add_rejected(syn.rejected("b", reason="truncated"))
    retry.close()
    for path, data in saved.items():
        path.write_bytes(data)  # the rewrite of the old rejects part never happened

    accepted, rejected = committed_ids(run)  # readers already prefer shards
    assert id_hash("a") in accepted and id_hash("a") not in rejected
    _store(run).open()
    assert_exactly_once(run, {"a", "b", "c"}, exact=True)
    rejects = pq.read_table(run / "rejects")
    assert sorted(zip(rejects.column("id").to_pylist(), rejects.column("reason").to_pylist(), strict=True)) == [
        ("b", "truncated"),
        ("c", "empty_answer"),
    ]


def test_closed_store_refuses_reuse(tmp_path):
    store = _store(tmp_path / "run")
    store.open()
    store.close()
    with pytest.raises(RuntimeError):
        store.add_accepted(syn.accepted("a"))
    with pytest.raises(RuntimeError):
        store.open()


def test_async_sync_runs_off_the_event_loop(tmp_path):
    run = tmp_path / "run"
    store = _store(run, shard_rows=10)

    async def main() -> None:
        store.open()
        for i in range(35):
            store.add_accepted(syn.accepted(f"p{i}"))
            if i % 4 == 0:
                await store.sync()
        await store.sync()

    asyncio.run(main())
    store.close()
    assert_exactly_once(run, {f"p{i}" for i in range(35)}, exact=True)
    assert len(list((run / "shards").glob("*.parquet"))) == 4
    assert os.listdir(run / "journal") == []


def test_crash_after_a_retried_id_is_journaled_keeps_the_new_completion(tmp_path):
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    store.add_rejected(syn.rejected("x"))
    store.close()
    retry = _store(run)
    retry.open(retry_rejects=True)
    retry.add_accepted(syn.accepted("x"))
    retry.sync_blocking()
    retry.abort()

    state = _store(run).open()
    assert state.recovered_rows == 1
    assert exactly_once.committed_ids(run, "shards", whole=True) == ["x"]
    assert exactly_once.committed_ids(run, "rejects", whole=True) == []


@pytest.mark.parametrize("crash", [False, True], ids=["live", "recovered"])
def test_a_row_the_schema_cannot_hold_lands_in_rejects_instead_of_poisoning_the_journal(tmp_path, crash):
    run = tmp_path / "run"
    store = _store(run, row_group_rows=2)
    store.open()
    bad = syn.accepted("bad")
    bad["attempts"] = 100_000  # does not fit int16
    _fill(store, ["a", "b"])
    store.add_accepted(bad)
    store.sync_blocking()
    store.abort() if crash else store.close()

    _store(run).open()
    assert_exactly_once(run, {"a", "b", "bad"}, exact=True)
    rejects = pq.read_table(run / "rejects")
    assert rejects.column("id").to_pylist() == ["bad"]
    assert rejects.column("reason").to_pylist() == ["unstorable_row"]
    assert "column 'attempts'" in rejects.column("detail")[0].as_py()


def test_parts_dictionary_encode_only_repeating_columns_and_skip_text_statistics(tmp_path):
    run = tmp_path / "run"
    store = _store(run, keep_fields=("source",))
    store.open()
    for i in range(120):
        store.add_accepted({**syn.accepted(f"p{i}"), "source": "web"})
    store.close()
    meta = pq.ParquetFile(sorted((run / "shards").glob("*.parquet"))[0]).metadata
    columns = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i) for i in range(meta.num_columns)}
    dictionary = {name for name, col in columns.items() if "RLE_DICTIONARY" in col.encodings}
    assert {"finish_reason", "model", "endpoint", "source", "messages.list.element.role"} <= dictionary
    assert dictionary.isdisjoint({"id", "reasoning", "answer", "messages.list.element.content"})
    assert columns["id"].is_stats_set and columns["finish_reason"].is_stats_set
    assert not columns["reasoning"].is_stats_set and not columns["answer"].is_stats_set
    # the data reads back unchanged
    assert sorted(pq.read_table(run / "shards").column("id").to_pylist()) == sorted(f"p{i}" for i in range(120))
