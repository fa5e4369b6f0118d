"""merge_run: every id exactly once, files of the target size, crash recovery from merge.json, refusal while live."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from pipeline.errors import ConfigError, LockedError, OutputError
from pipeline.schema import reject_schema, shard_schema, to_table
from pipeline.store.files import committed_parts
from pipeline.store.merge import PLAN, finish_interrupted_merge, merge_run
from tests.helpers.exactly_once import committed_ids


def _rows(start: int, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"p{i:05d}", "answer": f"a{i}", "source": str(i), **extra} for i in range(start, start + n)]


def make_run(run_dir: Path, sizes: list[int], *, folder: str = "shards") -> list[str]:
    """Committed parts of the given sizes in `folder`; returns every id in order."""
    (run_dir / "shards").mkdir(parents=True, exist_ok=True)
    (run_dir / folder).mkdir(exist_ok=True)
    schema = shard_schema(["source"]) if folder == "shards" else reject_schema(["source"])
    ids, start = [], 0
    for n, size in enumerate(sizes):
        rows = _rows(start, size, reason="truncated") if folder == "rejects" else _rows(start, size)
        pq.write_table(to_table(rows, schema), run_dir / folder / f"part-w{n % 3}-{n:05d}-{n:08x}.parquet")
        ids += [r["id"] for r in rows]
        start += size
    return ids


def _sizes(folder: Path) -> list[int]:
    return sorted((pq.ParquetFile(p).metadata.num_rows for p in committed_parts(folder)), reverse=True)


def test_merge_keeps_every_id_once_in_target_sized_files(tmp_path: Path) -> None:
    sizes = [37 + (i * 53) % 120 for i in range(37)]
    make_run(tmp_path, sizes)
    ids = committed_ids(tmp_path, "shards")
    before = pq.read_table(committed_parts(tmp_path / "shards"))
    result = merge_run(tmp_path, target_rows=1000, row_group_rows=256)
    total = sum(sizes)
    assert result["before_files"] == 37 and result["rows"] == total
    assert _sizes(tmp_path / "shards") == [1000] * (total // 1000) + [total % 1000]
    assert result["after_files"] == total // 1000 + 1
    merged = committed_ids(tmp_path, "shards")
    assert Counter(merged) == Counter(ids) and len(merged) == len(set(merged))
    assert merged == ids  # and in the same order
    assert pq.read_table(committed_parts(tmp_path / "shards")).equals(before)
    assert not (tmp_path / PLAN).exists()
    assert [p.name for p in (tmp_path / "shards").iterdir() if p.name.startswith(".")] == []
    part = pq.ParquetFile(committed_parts(tmp_path / "shards")[0])
    assert part.schema_arrow.equals(shard_schema(["source"]), check_metadata=False)
    assert part.metadata.row_group(0).column(0).compression == "ZSTD"
    assert part.metadata.row_group(0).num_rows == 256


def test_big_parts_are_left_alone_and_a_second_merge_is_a_no_op(tmp_path: Path) -> None:
    make_run(tmp_path, [1500, 300, 300, 300])
    big = max(committed_parts(tmp_path / "shards"), key=lambda p: pq.ParquetFile(p).metadata.num_rows)
    result = merge_run(tmp_path, target_rows=1000)
    assert big.exists() and _sizes(tmp_path / "shards") == [1500, 900]
    assert result["after_files"] == 2
    again = merge_run(tmp_path, target_rows=1000)
    assert again["before_files"] == again["after_files"] == 2 and again["outputs"] == 0


def test_rejects_are_merged_only_when_asked(tmp_path: Path) -> None:
    make_run(tmp_path, [10, 10])
    reject_ids = make_run(tmp_path, [5, 5, 5], folder="rejects")
    merge_run(tmp_path, target_rows=100)
    assert len(committed_parts(tmp_path / "rejects")) == 3
    merge_run(tmp_path, target_rows=100, rejects=True)
    assert _sizes(tmp_path / "rejects") == [15] and committed_ids(tmp_path, "rejects") == reject_ids
    assert pq.read_table(committed_parts(tmp_path / "rejects")[0]).column("reason").to_pylist() == ["truncated"] * 15


def _interrupt(run_dir: Path, outputs_done: int) -> tuple[list[str], list[str]]:
    """Simulate a crash after `outputs_done` outputs were renamed into place, before any input was deleted."""
    make_run(run_dir, [40] * 5)
    ids = committed_ids(run_dir, "shards")
    inputs = [p.name for p in committed_parts(run_dir / "shards")]
    table = pq.read_table([run_dir / "shards" / n for n in inputs])
    outputs = [{"name": f"merged-{i:012x}.parquet", "rows": 100} for i in range(2)]
    for i, out in enumerate(outputs[:outputs_done]):
        pq.write_table(table.slice(100 * i, 100), run_dir / "shards" / out["name"])
    (run_dir / "shards" / f".merge-{outputs[outputs_done - 1]['name']}.tmp").write_bytes(b"partial")
    plan = {"dir": "shards", "inputs": inputs, "outputs": outputs}
    (run_dir / PLAN).write_bytes(orjson.dumps(plan))
    return ids, inputs


def test_interrupted_merge_with_every_output_written_is_completed(tmp_path: Path) -> None:
    ids, inputs = _interrupt(tmp_path, outputs_done=2)
    assert len(committed_ids(tmp_path, "shards")) == 2 * len(ids)  # the crash left every id twice
    assert finish_interrupted_merge(tmp_path) == {"action": "completed", "dir": "shards", "inputs": 5, "outputs": 2}
    assert committed_ids(tmp_path, "shards") == ids and _sizes(tmp_path / "shards") == [100, 100]
    assert not (tmp_path / PLAN).exists() and not any(p.name.startswith(".") for p in (tmp_path / "shards").iterdir())
    assert finish_interrupted_merge(tmp_path) is None


def test_interrupted_merge_with_missing_outputs_is_rolled_back(tmp_path: Path) -> None:
    ids, inputs = _interrupt(tmp_path, outputs_done=1)
    assert finish_interrupted_merge(tmp_path) == {"action": "rolled_back", "dir": "shards", "inputs": 5, "outputs": 2}
    assert [p.name for p in committed_parts(tmp_path / "shards")] == inputs and committed_ids(tmp_path, "shards") == ids
    result = merge_run(tmp_path, target_rows=100)  # and the merge can simply be run again
    assert committed_ids(tmp_path, "shards") == ids and result["after_files"] == 2


def test_merge_run_recovers_an_interrupted_merge_first(tmp_path: Path) -> None:
    ids, _ = _interrupt(tmp_path, outputs_done=2)
    result = merge_run(tmp_path, target_rows=1000)
    assert result["recovered"]["action"] == "completed"
    assert committed_ids(tmp_path, "shards") == ids and _sizes(tmp_path / "shards") == [200]


def test_recovery_refuses_a_plan_whose_inputs_and_outputs_are_both_incomplete(tmp_path: Path) -> None:
    _, inputs = _interrupt(tmp_path, outputs_done=1)
    (tmp_path / "shards" / inputs[0]).unlink()
    with pytest.raises(OutputError, match="both incomplete"):
        finish_interrupted_merge(tmp_path)
    assert (tmp_path / PLAN).exists()


_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_rollback_refuses_when_an_input_lost_rows(tmp_path: Path) -> None:
    _, inputs = _interrupt(tmp_path, outputs_done=1)
    plan = orjson.loads((tmp_path / PLAN).read_bytes())
    plan["input_rows"] = [40] * len(inputs)
    (tmp_path / PLAN).write_bytes(orjson.dumps(plan))
    path = tmp_path / "shards" / inputs[2]
    pq.write_table(pq.read_table(path).slice(0, 10), path)  # e.g. a dedupe rewrote it meanwhile
    with pytest.raises(OutputError, match="gone or changed"):
        finish_interrupted_merge(tmp_path)


def test_a_failing_merge_rolls_back_at_once(tmp_path: Path) -> None:
    make_run(tmp_path, [30] * 4)
    ids = committed_ids(tmp_path, "shards")
    last = committed_parts(tmp_path / "shards")[-1]
    blob = bytearray(last.read_bytes())
    blob[4:200] = b"\xff" * 196  # data pages unreadable, footer intact: fails while the outputs are written
    last.write_bytes(bytes(blob))
    with pytest.raises(OutputError, match="cannot merge into"):
        merge_run(tmp_path, target_rows=1000)
    assert not (tmp_path / PLAN).exists()
    assert len(committed_parts(tmp_path / "shards")) == 4
    assert not any(p.name.startswith((".", "merged-")) for p in (tmp_path / "shards").iterdir())
    assert [
        i for p in committed_parts(tmp_path / "shards")[:3] for i in pq.read_table(p).column("id").to_pylist()
    ] == ids[:90]


@pytest.mark.parametrize("lock", ["worker-0.lock", "worker-7.lock", "rewrite.lock"])
def test_merge_refuses_while_a_lock_is_held(tmp_path: Path, lock: str) -> None:
    ids = make_run(tmp_path, [10, 10, 10])
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "worker-0.lock").touch()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path / "locks" / lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(LockedError, match=lock):
            merge_run(tmp_path, target_rows=100)
    finally:
        holder.communicate("", timeout=10)
    assert len(committed_parts(tmp_path / "shards")) == 3
    merge_run(tmp_path, target_rows=100)  # the holder is gone: the merge goes ahead
    assert committed_ids(tmp_path, "shards") == ids


def test_merge_refuses_while_journals_hold_rows(tmp_path: Path) -> None:
    make_run(tmp_path, [10, 10])
    (tmp_path / "journal").mkdir()
    (tmp_path / "journal" / "worker-0.3.jsonl").touch()  # empty journals are fine
    merge_run(tmp_path, target_rows=5)
    (tmp_path / "journal" / "worker-1.0.jsonl").write_bytes(b'{"kind": "accepted", "row": {"id": "x"}}\n')
    with pytest.raises(OutputError, match="resume the run first"):
        merge_run(tmp_path, target_rows=100)
    assert len(committed_parts(tmp_path / "shards")) == 2


def test_bad_target(tmp_path: Path) -> None:
    make_run(tmp_path, [1])
    with pytest.raises(ConfigError, match="target-rows"):
        merge_run(tmp_path, target_rows=0)
