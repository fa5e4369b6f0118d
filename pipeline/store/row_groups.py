"""A Parquet file's record batches read one row group at a time, in memory bounded by a row group.

`pyarrow.parquet.ParquetFile.iter_batches` over a whole file keeps decoded pages of string and nested columns for
as long as the iteration lasts (pyarrow 26: ~1.6 MB a 1,024-row batch of a run's shard, 168 MB held at the end of a
90,000-row merged file, freed only when the iteration ends). Memory then grows with the file, and merge writes files
of 100,000 rows and more: `regen export` on a merged run held 1.1 GB at 90K rows against 520 MB before the merge.
Asked for one row group at a time, the reader frees each group's pages when the next one starts.

`iter_batches` here yields the batches `ParquetFile.iter_batches` yields: `batch_size` rows each, the last one
shorter, spanning row groups as pyarrow's do. Callers whose output follows the batches (an export writes a row group
per batch) therefore write the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq


def iter_batches(
    pfile: pq.ParquetFile, batch_size: int, columns: Sequence[str] | None = None, *, use_threads: bool = True
) -> Iterator[pa.RecordBatch]:
    """The record batches of `pfile` (of `columns`, all when None), `batch_size` rows each but the last, one row
    group decoded at a time."""
    wanted = list(columns) if columns is not None else None
    carry: list[pa.RecordBatch] = []
    held = 0
    for group in range(pfile.num_row_groups):
        parts = pfile.iter_batches(batch_size=batch_size, row_groups=[group], columns=wanted, use_threads=use_threads)
        for batch in parts:
            if not carry and batch.num_rows == batch_size:
                yield batch
                continue
            carry.append(batch)
            held += batch.num_rows
            if held >= batch_size:
                joined = pa.Table.from_batches(carry)
                yield _one_batch(joined.slice(0, batch_size))
                rest = joined.slice(batch_size)
                carry, held = ([_one_batch(rest)] if rest.num_rows else []), rest.num_rows
    if held:
        yield _one_batch(pa.Table.from_batches(carry))


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """`table`'s rows (at least one) as one record batch, its chunks joined (pa.concat_batches wants pyarrow 19)."""
    batches: list[pa.RecordBatch] = table.combine_chunks().to_batches()
    return batches[0]
