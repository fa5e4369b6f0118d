"""Finished turns of unfinished conversations survive a crash and journal rotation, and vanish with their row."""

from pathlib import Path

from pipeline.records import Turn
from pipeline.store import RunStore
from pipeline.store import synthetic as syn


def _store(run_dir: Path, shard_rows: int = 10) -> RunStore:
    return RunStore(run_dir, worker_index=0, num_workers=1, keep_fields=(), shard_rows=shard_rows, row_group_rows=4)


def _turn(k: int) -> Turn:
    return Turn(reasoning=f"r{k}", answer=f"a{k}", finish_reason="stop", attempts=1)


def test_turns_survive_a_crash_and_are_handed_back_in_order(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.open().partial == {}
    for k in range(3):
        store.add_turn("conv-1", k, _turn(k))
    store.add_turn("conv-2", 0, _turn(0))
    store.add_turn("conv-2", 2, _turn(2))  # turn 1 never made it: only the prefix before the gap is usable
    store.sync_blocking()
    store.add_turn("conv-3", 0, _turn(0))  # added but never synced: lost with the crash, as rows are
    store.abort()

    state = _store(tmp_path).open()
    assert state.partial == {"conv-1": [_turn(0), _turn(1), _turn(2)], "conv-2": [_turn(0)]}


def test_turns_are_carried_across_rotation_and_dropped_when_the_row_lands(tmp_path: Path) -> None:
    store = _store(tmp_path, shard_rows=5)
    store.open()
    store.add_turn("conv-1", 0, _turn(0))
    store.add_turn("conv-2", 0, _turn(0))
    for i in range(12):  # two parts commit, so the journal holding the turns is deleted twice
        store.add_accepted(syn.accepted(f"p{i}"))
        store.sync_blocking()
    finished = syn.accepted("conv-2")
    store.add_accepted(finished)
    store.sync_blocking()
    assert len(list((tmp_path / "shards").glob("*.parquet"))) == 2
    store.abort()

    reopened = _store(tmp_path, shard_rows=5)
    state = reopened.open()
    assert state.partial == {"conv-1": [_turn(0)]}  # conv-2's row is done: its turns are not resumed
    reopened.close()
    assert _store(tmp_path).open().partial == {"conv-1": [_turn(0)]}  # still there after a clean close


def test_a_journal_of_garbage_is_warned_about_and_ignored(tmp_path: Path, caplog) -> None:
    store = _store(tmp_path)
    store.open()
    store.close()
    garbage = tmp_path / "journal" / "worker-0.7.jsonl"
    garbage.write_bytes(b"\x00\x01not json at all\n{torn")
    with caplog.at_level("WARNING", logger="pipeline.store.recovery"):
        _store(tmp_path).open()
    assert "journal has no readable line" in caplog.text and "worker-0.7.jsonl" in caplog.text
    assert not garbage.exists()
