"""The shared test helpers can fail: the exactly-once check catches a duplicate, a missing id and, with `exact`, an
id nobody asked for, on a run the real store wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.store import RunStore
from pipeline.store import synthetic as syn
from tests.helpers import assert_exactly_once


def _run(tmp_path: Path, ids: list[str]) -> Path:
    run = tmp_path / "run"
    store = RunStore(run, worker_index=0, num_workers=1, keep_fields=(), shard_rows=10)
    store.open()
    for n, i in enumerate(ids):
        store.add_rejected(syn.rejected(i)) if n % 4 == 0 else store.add_accepted(syn.accepted(i))
    store.sync_blocking()
    store.close()
    return run


def test_a_clean_run_passes_and_returns_what_is_where(tmp_path: Path) -> None:
    ids = [f"p{i}" for i in range(20)]
    good, bad = assert_exactly_once(_run(tmp_path, ids), ids, exact=True)
    assert sorted(good + bad) == sorted(ids) and len(bad) == 5


def test_a_part_committed_twice_is_caught_by_the_store_scan(tmp_path: Path) -> None:
    ids = [f"p{i}" for i in range(20)]
    run = _run(tmp_path, ids)
    part = sorted((run / "shards").glob("*.parquet"))[0]
    shutil.copy(part, part.with_name("copy-" + part.name))
    with pytest.raises(AssertionError, match="committed more than once"):
        assert_exactly_once(run, ids)


def test_a_missing_or_unasked_id_fails(tmp_path: Path) -> None:
    ids = [f"p{i}" for i in range(20)]
    run = _run(tmp_path, ids)
    with pytest.raises(AssertionError, match="missing"):
        assert_exactly_once(run, [*ids, "never-sent"])
    assert_exactly_once(run, ids[:10])
    with pytest.raises(AssertionError, match="not asked for"):
        assert_exactly_once(run, ids[:10], exact=True)
