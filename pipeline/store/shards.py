"""Part files under shards/ and rejects/: streamed into a hidden temp file, committed by rename.

A part is named `part-w{worker}-{seq:05d}-{uuid8}.parquet`; while it is being written it is
`.worker-{worker}-{seq}.parquet.tmp` in the same directory, so every `*.parquet` a reader can see is complete.
Rows reach the temp file one row group at a time, so memory is bounded by `row_group_rows`, not the part size.
The temp file is not durable and needs not be: the journal holds the same rows until the part is committed.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..schema import to_table
from .durable import output_errors, unlink_quiet
from .files import commit, parquet_options

UNSTORABLE = "unstorable_row"  # reason code of a row the schema cannot hold
ARROW_VALUE_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError)
Unstorable = Callable[[dict[str, Any], str], dict[str, Any] | None]
CONVERT_ROWS = 64  # rows converted to Arrow at a time, as they come (see PartWriter)

_PART = re.compile(r"^part-w(\d+)-(\d+)-[0-9a-f]+\.parquet$")
_TMP = re.compile(r"^\.worker-(\d+)-(\d+)\.parquet\.tmp$")


def part_name(worker: int, seq: int) -> str:
    return f"part-w{worker}-{seq:05d}-{uuid.uuid4().hex[:8]}.parquet"


def tmp_name(worker: int, seq: int) -> str:
    return f".worker-{worker}-{seq}.parquet.tmp"


def part_seqs(directory: Path, worker: int) -> list[int]:
    """Seq numbers of `worker`'s committed parts in `directory`."""
    if not directory.is_dir():
        return []
    return [int(m[2]) for e in os.scandir(directory) if (m := _PART.match(e.name)) and int(m[1]) == worker]


def tmp_workers(directory: Path) -> set[int]:
    if not directory.is_dir():
        return set()
    return {int(m[1]) for e in os.scandir(directory) if (m := _TMP.match(e.name))}


def remove_tmp_files(directory: Path, worker: int) -> None:
    """Delete the temp parts `worker` left behind; only the holder of that worker's lock may call this."""
    with output_errors(directory, "remove orphan temp files in"):
        for entry in os.scandir(directory):
            match = _TMP.match(entry.name)
            if match and int(match[1]) == worker:
                unlink_quiet(Path(entry.path))


class PartWriter:
    """One part being filled: rows are converted to Arrow `CONVERT_ROWS` at a time as they come, and written one
    row group of `row_group_rows` at a time.

    Converting as they come, not a whole row group at once, keeps a row group's Python rows and its Arrow table
    from being in memory together at the write: that peak (~15 MB per 512 thinking rows) set the level a worker's
    RSS kept afterwards (freed, not returned: allocator arenas), and it rose with the rate."""

    def __init__(
        self,
        directory: Path,
        schema: pa.Schema,
        worker: int,
        seq: int,
        row_group_rows: int,
        on_unstorable: Unstorable | None = None,
    ) -> None:
        self.directory = directory
        self.on_unstorable = on_unstorable or unstorable_reject
        self.schema = schema
        self.worker = worker
        self.seq = seq
        self.row_group_rows = row_group_rows
        self.rows = 0  # rows added to this part, written or buffered
        self.buffer: list[dict[str, Any]] = []  # rows not converted yet (fewer than CONVERT_ROWS)
        self._converted: list[pa.Table] = []  # converted rows not written yet
        self._converted_rows = 0
        self.ids: list[str] = []
        self._writer: pq.ParquetWriter | None = None

    @property
    def tmp_path(self) -> Path:
        return self.directory / tmp_name(self.worker, self.seq)

    @property
    def pending(self) -> int:
        """Rows added and not written to the temp file yet."""
        return len(self.buffer) + self._converted_rows

    def add(self, row: dict[str, Any]) -> None:
        self.buffer.append(row)
        self.ids.append(row["id"])
        self.rows += 1
        if len(self.buffer) >= CONVERT_ROWS:
            self._convert()

    def write_full_groups(self) -> None:
        while self.pending >= self.row_group_rows:
            self._convert()
            self._write_group(self._take(self.row_group_rows))

    def commit(self) -> Path | None:
        """Write the rest, fsync, rename into place. Returns the committed path (None if the part is empty).

        The caller fsyncs the directory (once for all parts of a commit).
        """
        if self.rows == 0:
            return None
        self._convert()
        if self._converted_rows:
            self._write_group(self._take(self._converted_rows))
        final = self.directory / part_name(self.worker, self.seq)
        with output_errors(self.tmp_path, "commit the part file"):
            assert self._writer is not None
            writer, self._writer = self._writer, None
            writer.close()
            commit(self.tmp_path, final, sync_dir=False)
        return final

    def discard(self) -> None:
        """Drop the temp file (its rows are still in the journal)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except OSError:
                pass
        unlink_quiet(self.tmp_path)

    def _convert(self) -> None:
        if not self.buffer:
            return
        rows, self.buffer = self.buffer, []
        try:
            table = to_table(rows, self.schema)
        except ARROW_VALUE_ERRORS:
            table = self._salvage(rows)
        self._converted.append(table)
        self._converted_rows += table.num_rows

    def _take(self, n: int) -> pa.Table:
        """The first `n` converted rows, as one table (its chunks are written as one row group)."""
        table = pa.concat_tables(self._converted)
        head, rest = table.slice(0, n), table.slice(n)
        self._converted = [rest] if rest.num_rows else []
        self._converted_rows = rest.num_rows
        return head

    def _write_group(self, table: pa.Table) -> None:
        with output_errors(self.tmp_path, "write the part file"):
            if self._writer is None:
                self._writer = pq.ParquetWriter(self.tmp_path, self.schema, **parquet_options(self.schema))
            self._writer.write_table(table, row_group_size=max(1, table.num_rows))

    def _salvage(self, rows: list[dict[str, Any]]) -> pa.Table:
        """A row the schema cannot hold (a caller's bug) must not poison the journal for every later open():
        it is handed to `on_unstorable`, which returns a replacement row for this part or None."""
        good = []
        for row in rows:
            try:
                to_table([row], self.schema)
                good.append(row)
            except ARROW_VALUE_ERRORS as exc:
                replacement = self.on_unstorable(row, f"{_bad_column(row, self.schema)}: {exc}")
                if replacement is not None:
                    good.append(replacement)
        return to_table(good, self.schema)


def _bad_column(row: dict[str, Any], schema: pa.Schema) -> str:
    for field in schema:
        try:
            pa.array([row.get(field.name)], type=field.type)
        except ARROW_VALUE_ERRORS:
            return f"column {field.name!r}"
    return "row"


def unstorable_reject(row: dict[str, Any], error: str) -> dict[str, Any]:
    """The reject row that stands for a row the schema cannot hold: id, reason, and the error."""
    created = row.get("created_at")
    return {
        "id": str(row["id"]),
        "created_at": created if isinstance(created, int) else time.time_ns() // 1000,
        "attempts": 0,
        "reason": UNSTORABLE,
        "detail": f"the store could not write this row: {error}"[:2000],
    }


def write_rows(writer: PartWriter, rows: Iterable[dict[str, Any]]) -> None:
    for row in rows:
        writer.add(row)
        writer.write_full_groups()
