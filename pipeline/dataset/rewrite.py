"""One original dataset file written again in its own format, row by row, for the repaired export (dataset/repair.py).

What each row becomes is the caller's choice (`RowChoice.row`); this module only moves bytes, and a row returned
unchanged (the same object) is written as it was read: the same line bytes for JSONL (gzipped or not), the same
record batch for Parquet when no row of it changed, the same JSON value for a JSON array. Each writer sets
`choice.style` for its file first: empty for JSONL and JSON (the rows show it), the message struct's reasoning
field for Parquet.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol, cast

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..inputs import conversations
from ..inputs.input_files import Broken, json_array_rows
from ..inputs.stored import INLINE, REASONING_FIELDS
from ..store import row_groups

BATCH_ROWS = 1024


class RowChoice(Protocol):
    """What becomes of each row of a file, and where its reasoning goes (`style`, set here per file)."""

    style: str

    def row(self, data: Any, source: str) -> Any:
        """`data` itself (written as read), another row, or None (left out); `source` is `path:line` or
        `path:index`."""
        ...


def rewrite(kind: str, choice: RowChoice, path: Path, tmp: Path) -> None:
    """Write the file `path` (of input kind `kind`) to `tmp` with each row as `choice` chooses."""
    _WRITERS[kind](choice, path, tmp)


def _jsonl(choice: RowChoice, path: Path, tmp: Path) -> None:
    """Line by line; an untouched line (blank, unparsable, or a row not regenerated) is copied byte for byte."""
    gz = path.name.endswith(".gz")
    choice.style = ""
    with _open_in(path, gz) as src, _open_out(tmp, gz) as dst:
        for lineno, line in enumerate(src, 1):
            if not line.strip():
                dst.write(line)
                continue
            try:
                data = orjson.loads(line.removeprefix(b"\xef\xbb\xbf") if lineno == 1 else line)
            except orjson.JSONDecodeError as exc:
                data = Broken(f"invalid JSON: {exc}")
            row = choice.row(data, f"{path}:{lineno}")
            if row is data:
                dst.write(line)
            elif row is not None:
                dst.write(orjson.dumps(row) + b"\n")


def _json_array(choice: RowChoice, path: Path, tmp: Path) -> None:
    choice.style = ""
    with _open_out(tmp, False) as dst:
        dst.write(b"[")
        first = True
        for rows in json_array_rows(path, BATCH_ROWS):
            for index, data in rows:
                row = choice.row(data, f"{path}:{index}")
                if row is not None:
                    dst.write((b"\n" if first else b",\n") + orjson.dumps(row))
                    first = False
        dst.write(b"\n]\n")


def _parquet(choice: RowChoice, path: Path, tmp: Path) -> None:
    """Record batch by record batch with the original schema; a batch no row of which changes is written as read."""
    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    choice.style = _schema_style(schema)
    start = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        for batch in row_groups.iter_batches(pf, BATCH_ROWS):
            rows = batch.to_pylist()
            out = [choice.row(data, f"{path}:{i}") for i, data in enumerate(rows, start)]
            if all(a is b for a, b in zip(out, rows, strict=True)):
                writer.write_batch(batch)
            else:
                writer.write_table(pa.Table.from_pylist([r for r in out if r is not None], schema=schema))
            start += batch.num_rows


def _schema_style(schema: pa.Schema) -> str:
    """The reasoning field of the conversation column's message struct, if it has one."""
    for name in conversations.CONVERSATION_FIELDS:
        if name in schema.names:
            kind = schema.field(name).type
            if pa.types.is_list(kind) and pa.types.is_struct(kind.value_type):
                fields = {kind.value_type.field(i).name for i in range(kind.value_type.num_fields)}
                return next((f for f in REASONING_FIELDS if f in fields), INLINE)
    return ""


def _arrow(choice: RowChoice, path: Path, tmp: Path) -> None:
    raise InputError(f"{path}: a repaired export writes JSONL, JSON and Parquet; save the dataset as Parquet first")


_WRITERS: dict[str, Callable[[RowChoice, Path, Path], None]] = {
    "jsonl": _jsonl,
    "json": _json_array,
    "parquet": _parquet,
    "arrow": _arrow,
}


def _open_in(path: Path, gz: bool) -> IO[bytes]:
    try:
        return cast(IO[bytes], gzip.open(path, "rb") if gz else path.open("rb"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def _open_out(path: Path, gz: bool) -> IO[bytes]:
    return cast(IO[bytes], gzip.open(path, "wb") if gz else path.open("wb"))
