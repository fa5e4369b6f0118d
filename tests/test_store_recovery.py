"""Recovery against the other rewriters of a RUN_DIR: an interrupted `regen merge`, an interrupted quarantine."""

from pathlib import Path

import pipeline.store.merge as merge
import pipeline.store.quarantine as quarantine
from pipeline.schema import REASONS
from pipeline.store import RunStore
from pipeline.store import synthetic as syn
from pipeline.store.shards import UNSTORABLE
from tests.helpers import assert_exactly_once
from tests.helpers.exactly_once import placements


def _store(run_dir: Path, shard_rows: int = 10) -> RunStore:
    return RunStore(run_dir, worker_index=0, num_workers=1, keep_fields=(), shard_rows=shard_rows, row_group_rows=4)


def _write(run_dir: Path, rows: list[dict], shard_rows: int = 10) -> None:
    store = _store(run_dir, shard_rows)
    store.open()
    for row in rows:
        store.add_accepted(row)
    store.close()


def _reopen(run_dir: Path) -> None:
    store = _store(run_dir)
    store.open()
    store.close()


def _where_once(run_dir: Path, ids: set[str]) -> dict[str, str]:
    """{id: the one file that holds it}, after the shared exactly-once check."""
    assert_exactly_once(run_dir, ids, exact=True)
    return {i: next(iter(c)) for i, c in placements(run_dir).items()}


def _interrupted_merge(run_dir: Path) -> None:
    """A `regen merge` killed after writing every output, before deleting its inputs."""
    with merge.exclusive(run_dir):
        assert merge.stage_merge(run_dir, run_dir / "shards", target_rows=25) is not None
    assert (run_dir / merge.PLAN).exists()


def test_open_rolls_an_interrupted_merge_forward(tmp_path: Path) -> None:
    run = tmp_path / "run"
    ids = {f"p{i:03d}" for i in range(50)}
    _write(run, [syn.accepted(i) for i in sorted(ids)])
    inputs = sorted(p.name for p in (run / "shards").glob("*.parquet"))
    _interrupted_merge(run)

    _reopen(run)
    where = _where_once(run, ids)
    assert not (run / merge.PLAN).exists()
    assert {name.split("/")[1].split("-")[0] for name in where.values()} == {"merged"}
    assert not any((run / "shards" / name).exists() for name in inputs)


def test_open_rolls_a_half_written_merge_back(tmp_path: Path) -> None:
    run = tmp_path / "run"
    ids = {f"p{i:03d}" for i in range(50)}
    _write(run, [syn.accepted(i) for i in sorted(ids)])
    before = {p.name: p.read_bytes() for p in (run / "shards").glob("*.parquet")}
    _interrupted_merge(run)
    sorted((run / "shards").glob("merged-*.parquet"))[-1].unlink()  # killed before the last output was renamed

    _reopen(run)
    _where_once(run, ids)
    assert not (run / merge.PLAN).exists()
    # The inputs were never touched: settle did not treat the merge outputs as ordinary duplicates.
    assert {p.name: p.read_bytes() for p in (run / "shards").glob("*.parquet")} == before
    assert merge.merge_run(run, target_rows=25)["after_files"] == 2


def _bad(i: str) -> dict:
    row = syn.accepted(i)
    row["answer"] = ""  # fails validate (empty_answer)
    return row


def _interrupted_quarantine(run_dir: Path) -> None:
    """`regen validate --quarantine` killed after writing the quarantine rejects, before rewriting the shard."""
    quarantine.stage_quarantine(run_dir)


def test_an_interrupted_quarantine_is_completed_not_undone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    good = {f"g{i}" for i in range(12)}
    bad = {"b1", "b2"}
    _write(run, [syn.accepted(i) for i in sorted(good)] + [_bad(i) for i in sorted(bad)], shard_rows=100)
    _interrupted_quarantine(run)
    assert {i for i, c in placements(run).items() if c.total() > 1} == bad  # in the shard and in the quarantine

    _reopen(run)
    where = _where_once(run, good | bad)
    assert {i for i, name in where.items() if name.startswith("rejects/quarantine-")} == bad
    assert quarantine.validate_run(run, quarantine=True)["quarantined"] == 0  # nothing left to move


def test_a_retry_accepted_after_quarantine_keeps_its_shard_row(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, [syn.accepted("g0"), _bad("b1")], shard_rows=100)
    quarantine.validate_run(run, quarantine=True)
    # A --retry-rejects run accepted b1 again and was killed before it removed the old quarantine row.
    _write(run, [syn.accepted("b1")], shard_rows=100)
    assert placements(run)["b1"].total() == 2

    _reopen(run)
    where = _where_once(run, {"g0", "b1"})
    assert where["b1"].startswith("shards/")


def test_an_ordinary_reject_still_loses_to_a_shard_row(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = _store(run)
    store.open()
    store.add_rejected(syn.rejected("x"))
    store.close()
    _write(run, [syn.accepted("x")])

    _reopen(run)
    assert _where_once(run, {"x"})["x"].startswith("shards/")


def test_the_store_reason_code_is_a_documented_reason() -> None:
    assert UNSTORABLE in REASONS
    assert REASONS.index(UNSTORABLE) > REASONS.index("exhausted_retries")
