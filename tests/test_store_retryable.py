"""Rejects that are not a verdict on the prompt (`exhausted_retries`: the servers failed it) are pending again for
the next run, without --retry-rejects; verdicts stay done. A retried id leaves its old reject row once it lands."""

from collections import Counter
from pathlib import Path

from pipeline.store import RunStore, id_hash
from pipeline.store import synthetic as syn
from tests.helpers.exactly_once import FOLDERS, committed_ids


def _store(run_dir: Path) -> RunStore:
    return RunStore(run_dir, worker_index=0, num_workers=1, keep_fields=(), shard_rows=10, row_group_rows=4)


def test_exhausted_retries_are_pending_again_and_leave_rejects_when_they_land(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.open()
    store.add_accepted(syn.accepted("good"))
    store.add_rejected(syn.rejected("verdict", reason="empty_answer"))
    store.add_rejected(syn.rejected("transport", reason="exhausted_retries"))
    store.close()

    store = _store(tmp_path)
    state = store.open()
    assert id_hash("transport") not in state.done  # a later run generates it again
    assert id_hash("verdict") in state.done and id_hash("good") in state.done
    assert state.rejected == 1
    store.add_accepted(syn.accepted("transport"))
    store.close()
    placed = Counter((sub, i) for sub in FOLDERS for i in committed_ids(tmp_path, sub, whole=True))
    assert placed == Counter({("shards", "good"): 1, ("rejects", "verdict"): 1, ("shards", "transport"): 1})

    state = _store(tmp_path).open()
    assert {id_hash(i) in state.done for i in ("good", "verdict", "transport")} == {True}
