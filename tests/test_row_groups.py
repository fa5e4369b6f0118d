"""`store.row_groups.iter_batches`: pyarrow's batches of a file, read one row group at a time. What it saves (pyarrow
keeping a whole file's decoded pages of a run's shard while it iterates) shows on real runs' files, not on small
synthetic ones: `scripts/bench.py --only scale` measures it (its exports after `merge`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.store.row_groups import iter_batches

TURN = pa.struct([("reasoning", pa.string()), ("answer", pa.string())])


def _file(path: Path, rows: int, row_group: int, text: int = 8) -> Path:
    table = pa.table(
        {
            "id": [f"row-{i}" for i in range(rows)],
            "turns": pa.array([[{"reasoning": f"{i}" * text, "answer": f"a{i}"}] for i in range(rows)], pa.list_(TURN)),
        }
    )
    pq.write_table(table, path, row_group_size=row_group)
    return path


@pytest.mark.parametrize(
    ("rows", "row_group", "batch"),
    [(0, 512, 1024), (1, 512, 1024), (5000, 512, 1024), (5000, 1000, 1000), (5000, 7, 64), (3000, 4096, 1024),
     (10000, 333, 65536), (4097, 4096, 4096)],
)  # fmt: skip
def test_the_batches_are_pyarrows_own(tmp_path: Path, rows: int, row_group: int, batch: int) -> None:
    path = _file(tmp_path / "f.parquet", rows, row_group)
    theirs = list(pq.ParquetFile(path).iter_batches(batch_size=batch))
    ours = list(iter_batches(pq.ParquetFile(path), batch))
    assert [b.num_rows for b in ours] == [b.num_rows for b in theirs]
    assert all(a.equals(b) for a, b in zip(ours, theirs, strict=True))
    assert [b.num_rows for b in iter_batches(pq.ParquetFile(path), batch, ["id"])] == [b.num_rows for b in theirs]
    assert all(b.schema.names == ["id"] for b in iter_batches(pq.ParquetFile(path), batch, ["id"]))
