"""validate_run: re-validation of committed shards and the exactly-once quarantine, crash window included."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.config import ValidateConfig
from pipeline.inspection import format_validate, inspect_run, validate_run
from pipeline.store import quarantine as q
from tests.helpers.inspection_runs import build_run

EMPTY = {f"p{i:05d}" for i in range(100, 120)}  # shard 0002's empty answers
LOOPING = {f"p{i:05d}" for i in range(120, 130)}


def ids(folder: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    for path in sorted(folder.glob("*.parquet")):
        found.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    return found


def placement(run: Path) -> tuple[Counter[str], Counter[str]]:
    return ids(run / "shards"), ids(run / "rejects")


def test_validate_reports_without_touching(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    before = placement(run)
    r = validate_run(run)
    assert (r["rows"], r["failed"], r["quarantined"]) == (200, 30, 0)
    assert r["failed_by_reason"] == {"answer_in_reasoning": 20, "looping": 10}  # the run's reject_looping = "any"
    assert r["failed_by_shard"] == {"w0-0002.parquet": 30}
    assert {x["id"] for x in r["examples"]} <= EMPTY | LOOPING
    assert placement(run) == before
    assert "--quarantine" in format_validate(r)
    json.dumps(r)
    default = validate_run(run, ValidateConfig())  # by default a loop the model ended (finish_reason stop) is kept
    assert default["failed_by_reason"] == {"answer_in_reasoning": 20}


def test_thresholds_come_from_run_json_or_the_caller(tmp_path: Path) -> None:
    run = build_run(tmp_path, validate={"max_repetition": 0.5, "reject_looping": "off"})
    assert validate_run(run)["failed_by_reason"] == {"answer_in_reasoning": 20, "degenerate_repetition": 10}
    loose = ValidateConfig(reject_answer_in_reasoning=False, require_answer=False, reject_looping="off")
    assert validate_run(run, loose)["failed"] == 0


def test_quarantine_moves_exactly_the_failing_rows(tmp_path: Path) -> None:
    run = build_run(tmp_path, validate={"max_repetition": 0.5, "reject_looping": "any"})
    shards0, rejects0 = placement(run)
    r = validate_run(run, quarantine=True)
    assert r["quarantined"] == 30 and r["repaired"] == 0
    shards1, rejects1 = placement(run)
    assert set(shards0) - set(shards1) == EMPTY | LOOPING
    assert set(rejects1) - set(rejects0) == EMPTY | LOOPING
    assert max((shards1 + rejects1).values()) == 1
    assert set(shards1 + rejects1) == set(shards0 + rejects0)
    moved = pq.read_table(next((run / "rejects").glob("quarantine-w0-0002-*.parquet")))
    assert moved.schema.names[-2:] == ["reason", "detail"]
    reasons = Counter(moved.column("reason").to_pylist())
    assert reasons == {"answer_in_reasoning": 20, "looping": 10}  # looping comes before degenerate_repetition
    assert all(d.startswith("quarantined by validate: ") for d in moved.column("detail").to_pylist())
    assert pq.ParquetFile(run / "shards" / "w0-0002.parquet").metadata.num_rows == 20
    again = validate_run(run, quarantine=True)
    assert (again["failed"], again["quarantined"]) == (0, 0)
    after = inspect_run(run)
    assert after["empty_answers"]["rows"] == 0 and after["rejected"] == 60
    assert not [p for p in run.rglob("*") if p.name.startswith(".") and "quarantine" in p.name]


def test_crash_between_the_two_steps_converges(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    everything = set(ids(run / "shards") + ids(run / "rejects"))

    q.stage_quarantine(run)  # killed between writing rejects and rewriting the shard
    shards, rejects = placement(run)
    assert {i for i in EMPTY if shards[i] and rejects[i]} == EMPTY  # the crash window: in both places
    assert set(shards + rejects) == everything  # ... but nowhere lost
    # The repair must hold even when the rows would now pass: the reject copy wins, the shard loses.
    r = validate_run(run, ValidateConfig(reject_answer_in_reasoning=False, require_answer=False), quarantine=True)
    assert (r["quarantined"], r["repaired"]) == (0, 30)  # the empty answers and the looping rows
    shards, rejects = placement(run)
    assert max((shards + rejects).values()) == 1 and set(shards + rejects) == everything
    assert EMPTY <= set(rejects) and not EMPTY & set(shards)
    assert len(list((run / "rejects").glob("quarantine-*.parquet"))) == 1


def test_crash_while_writing_leaves_only_hidden_files(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    stale = [
        run / "rejects" / ".quarantine-w0-0002-abc.parquet.tmp",
        run / "shards" / ".quarantine-w0-0002.parquet.tmp",
    ]
    for p in stale:
        p.write_bytes(b"torn")
    assert inspect_run(run)["rows"] == 230  # hidden files are never read
    validate_run(run, quarantine=True)
    assert not any(p.exists() for p in stale)
    assert (run / "shards" / ".w0-0004.parquet.tmp").exists()  # not ours: left alone
