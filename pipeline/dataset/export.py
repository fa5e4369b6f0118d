"""Export a RUN_DIR as training data in the shape a trainer reads (formats.py, tokenized.py), plus its card: the
writer of every training format of the registry (exporters.py), which decides the format's converter and options.

The export streams: committed parts are read one record batch at a time and written to output files of at most
`rows_per_file` rows, each built as a hidden temp file and renamed into place, so an interrupted export never leaves
a half-written file that looks complete. Only committed files are read (`*.parquet`, not hidden, not `*.tmp`);
rejected rows are exported only when asked for, into their own `rejects` config with `reason` and `detail`.

Layout of `out`:

    out/README.md                  dataset card (card.py); front matter: config `default` (accepted), `rejects`
    out/regen-config.toml          the run's resolved config without endpoint URLs or hosts (redact.py)
    out/data/train-00000.parquet   accepted rows (or .jsonl)
    out/data/rejects-00000.parquet rejected rows, only with include_rejects
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError, OutputError
from ..schema import BASE_FIELDS, REJECT_FIELDS, to_table
from ..store import id_hash, id_hashes, row_groups
from ..store.files import damage_note, readable_parts, refuse_partial
from ..store.layout import MANIFEST, PART_KINDS, REJECTS, SHARDS
from ..store.scan import duplicated_hashes
from .card import CardOptions, write_card
from .formats import BatchOutput, Format
from .shapes import Style, think_block

DATA_DIR = "data"
TRAIN, REJECTED = "train", "rejects"  # the splits: data/{split}-*.{ext}, the card's configs `default` and `rejects`
BATCH_ROWS = 1024

_BASE_NAMES = {f.name for f in BASE_FIELDS} | {f.name for f in REJECT_FIELDS}

Row = dict[str, Any]


def assistant_content(reasoning: str | None, answer: str | None, think_open: str, think_close: str) -> str:
    """The assistant turn a trainer sees inline: the reasoning inside think tags, a blank line, then the answer."""
    return think_block(reasoning, answer or "", think_open, think_close)


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """How a training export is written: `regen export`'s flags of the same names (the registry, exporters.py, checks
    them for the format and decides `reasoning` and `file_format` before export_rows reads them)."""

    file_format: str = "parquet"  # or jsonl; specforge and openai-batch-output write jsonl, tokenized parquet
    rows_per_file: int = 100_000
    reasoning: str | None = None  # field, inline or none; None: the format's own (field; sharegpt: inline)
    think_open: str = "<think>"  # the tags around inline reasoning
    think_close: str = "</think>"
    expand_turns: bool = False  # one row per generated assistant turn
    include_rejects: bool = False  # rejected rows too, in their own split
    tokenizer: Path | None = None  # tokenized: a local tokenizer folder (nothing is downloaded)
    chat_template: Path | None = None  # tokenized: a Jinja chat template file replacing the tokenizer's
    card: CardOptions | None = None  # the card's license and languages (default: the run's [export])
    partial: bool = False  # export even when committed parts are damaged (the card says what is missing)


def export_rows(
    run_dir: Path,
    out: Path,
    options: ExportOptions,
    *,
    name: str,
    converter: Callable[[str, Style, ExportOptions, bool], Format],
) -> dict[str, Any]:
    """Write the run's accepted rows (and rejects if asked) as format `name`, shaped by `converter`, to `out`, plus
    a dataset card. `options` come checked from the registry, their reasoning mode and file format decided.

    Returns `{format, file_format, reasoning, expand_turns, files, rows, rejected_rows, skipped, notes, data_files,
    damaged, duplicates_skipped, card}`; `files` and `data_files` are relative to `out`. Files of an earlier export
    to the same `out` that this one did not rewrite are removed. InputError naming them when committed parts are
    damaged, unless `options.partial` (the card then says what is missing).
    """
    assert options.reasoning is not None, "exporters.RowsExporter.checked decides the reasoning mode"
    if not (run_dir / SHARDS).is_dir() and not (run_dir / MANIFEST).is_file():
        raise InputError(f"{run_dir}: not a run directory (no run.json, no shards/)")
    _check_out(run_dir, out)
    style = Style(options.reasoning, options.think_open, options.think_close, tools=_has_tools(run_dir))
    convert = converter(name, style, options, bool(_generation(run_dir).get("thinking", True)))
    splits = [(TRAIN, SHARDS)] + ([(REJECTED, REJECTS)] if options.include_rejects else [])
    damaged = refuse_partial(run_dir, [kind for _, kind in splits], partial=options.partial)
    files: list[Path] = []
    counts: dict[str, int] = {}
    schemas: dict[str, pa.Schema] = {}
    once = _Once(duplicated_hashes(run_dir))
    for split, kind in splits:
        parts = readable_parts(run_dir / kind)
        schema = convert.schema(_keep_fields(parts), rejects=kind == REJECTS)
        writer = SplitWriter(out / DATA_DIR, split, options.file_format, schema, options.rows_per_file)
        _write_split(writer, convert, parts, once)
        files += writer.files
        counts[split] = writer.rows
        if schema is not None and writer.rows:
            schemas[split] = schema
    _remove_stale(out / DATA_DIR, keep=set(files))
    summary: dict[str, Any] = {
        "format": name,
        "file_format": options.file_format,
        "reasoning": options.reasoning,
        "expand_turns": options.expand_turns,
        "files": [str(p.relative_to(out)) for p in files],
        "rows": counts[TRAIN],
        "rejected_rows": counts.get(REJECTED, 0),
        "skipped": dict(convert.skipped.most_common()),
        "notes": dict(getattr(convert, "notes", {})),
        "data_files": {split: f"{DATA_DIR}/{split}-*.{options.file_format}" for split, _ in splits if counts[split]},
        "damaged": [damage_note(d) for d in damaged],
        "duplicates_skipped": once.skipped,
    }
    summary["card"] = str(write_card(run_dir, out, summary, schemas=schemas, options=options.card))
    return summary


def _write_split(writer: SplitWriter, convert: Format, parts: list[Path], once: _Once) -> None:
    """Every row of `parts` converted, each id once, into `writer` (an openai batch line when its last sample
    is read)."""
    if isinstance(convert, BatchOutput):
        convert.expect(_SampleCounts(parts).size)
    with writer:
        for batch in _batches(parts):
            writer.write(convert.rows(once.first(batch)))
        if isinstance(convert, BatchOutput):
            writer.write(convert.finish())


def _generation(run_dir: Path) -> dict[str, Any]:
    try:
        manifest = orjson.loads((run_dir / MANIFEST).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    generation = (manifest.get("config") or {}).get("generation") if isinstance(manifest, dict) else None
    return generation if isinstance(generation, dict) else {}


def _check_out(run_dir: Path, out: Path) -> None:
    """`out` is a folder (or not there yet) outside every run directory: an export never writes into a run."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: an existing file; the export writes a folder (README.md, data/), name a new one")
    target, run = out.resolve(), run_dir.resolve()
    for folder in (target, *target.parents):
        if folder == run or (folder / MANIFEST).is_file():
            raise OutputError(f"{out}: inside the run directory {folder}; export to a folder outside it")


def _has_tools(run_dir: Path) -> bool:
    """Whether any committed row is a tool conversation (it has tools, or messages that call or answer one): the
    export's messages then carry tool_calls and its rows a `tools` column."""
    for kind in PART_KINDS:
        for part in readable_parts(run_dir / kind):
            pf = pq.ParquetFile(part)
            names = [n for n in ("tools", "message_extras") if n in pf.schema_arrow.names]
            table = pf.read(columns=names) if names else None
            if table is not None and any(table.column(n).null_count < table.num_rows for n in names):
                return True
    return False


def _keep_fields(parts: list[Path]) -> list[str]:
    if not parts:
        return []
    return [n for n in pq.read_schema(parts[0]).names if n not in _BASE_NAMES]


def _batches(parts: list[Path]) -> Iterator[list[Row]]:
    for path in parts:
        try:
            for batch in row_groups.iter_batches(pq.ParquetFile(path), BATCH_ROWS):
                yield batch.to_pylist()
        except FileNotFoundError:
            raise InputError(f"{path}: vanished during export (is a merge running?); export again") from None


class _SampleCounts:
    """How many rows of some parts are samples of each input row (`source_id`), each id counted once, as `_Once`
    lets it through. Read from the id columns only, as 64-bit hashes (16 bytes per sample row); a part whose
    footer says it has no sample (schema 1, or `source_id` all null) is not read at all."""

    def __init__(self, parts: list[Path]) -> None:
        ids, sources = [np.empty(0, dtype=np.uint64)], [np.empty(0, dtype=np.uint64)]
        for path in parts:
            try:
                if not _has_samples(pq.ParquetFile(path).metadata):
                    continue
                table = pq.read_table(path, columns=["id", "source_id"])
            except FileNotFoundError:
                raise InputError(f"{path}: vanished during export (is a merge running?); export again") from None
            table = table.filter(pc.is_valid(table["source_id"]))
            ids.append(id_hashes(table["id"].to_pylist()))
            sources.append(id_hashes(table["source_id"].to_pylist()))
        _, first = np.unique(np.concatenate(ids), return_index=True)
        self.keys, self.counts = np.unique(np.concatenate(sources)[first], return_counts=True)

    def size(self, source_id: str) -> int:
        key = np.uint64(id_hash(source_id))
        at = int(np.searchsorted(self.keys, key))
        return int(self.counts[at]) if at < len(self.keys) and self.keys[at] == key else 0


def _has_samples(meta: pq.FileMetaData) -> bool:
    """Whether a part may hold a non-null `source_id` (True when its statistics cannot tell)."""
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if "source_id" not in names:
        return False
    column, nulls = names.index("source_id"), 0
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_null_count:
            return True
        nulls += stats.null_count
    result: bool = nulls < meta.num_rows
    return result


class _Once:
    """Lets each id through once: a committed id in two files (before a resume settles it) is exported from the
    first file only, shards before rejects. Costs nothing per row when the run has no duplicate."""

    def __init__(self, duplicated: np.ndarray) -> None:
        self.duplicated = duplicated
        self.seen: set[str] = set()
        self.skipped = 0

    def first(self, rows: list[Row]) -> list[Row]:
        if len(self.duplicated) == 0:
            return rows
        kept = []
        for row in rows:
            if row["id"] in self.seen:
                self.skipped += 1
                continue
            if np.isin(id_hash(row["id"]), self.duplicated):
                self.seen.add(row["id"])
            kept.append(row)
        return kept


class SplitWriter:
    """Rows of one split into `{split}-{i:05d}.{ext}` files of at most `rows_per_file` rows, each committed by
    fsync + rename of a hidden temp file. Use as a context manager: an error removes the temp file in progress."""

    def __init__(
        self, folder: Path, split: str, file_format: str, schema: pa.Schema | None, rows_per_file: int
    ) -> None:
        self.folder, self.split, self.file_format = folder, split, file_format
        self.schema, self.rows_per_file = schema, rows_per_file
        self.files: list[Path] = []
        self.rows = 0
        self._in_file = 0
        self._tmp: Path | None = None
        self._parquet: pq.ParquetWriter | None = None
        self._jsonl: IO[bytes] | None = None

    def write(self, rows: list[Row]) -> None:
        while rows:
            if self._tmp is None:
                self._open()
            room = self.rows_per_file - self._in_file
            chunk, rows = rows[:room], rows[room:]
            self._write_chunk(chunk)
            self._in_file += len(chunk)
            self.rows += len(chunk)
            if self._in_file == self.rows_per_file:
                self._commit()

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            if self._tmp is not None:
                self._commit()
            return
        self._close_handles()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)

    def _final_path(self) -> Path:
        return self.folder / f"{self.split}-{len(self.files):05d}.{self.file_format}"

    def _open(self) -> None:
        self._tmp = self.folder / f".{self._final_path().name}.tmp"
        self._in_file = 0
        with _output_errors(self._tmp, "create"):
            self.folder.mkdir(parents=True, exist_ok=True)
            if self.file_format == "jsonl":
                self._jsonl = self._tmp.open("wb")
            else:
                assert self.schema is not None
                self._parquet = pq.ParquetWriter(self._tmp, self.schema, compression="zstd")

    def _write_chunk(self, rows: list[Row]) -> None:
        with _output_errors(self._tmp, "write"):
            if self._jsonl is not None:
                self._jsonl.write(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
            elif self._parquet is not None and self.schema is not None:
                self._parquet.write_table(to_table(rows, self.schema), row_group_size=len(rows))

    def _commit(self) -> None:
        assert self._tmp is not None
        final = self._final_path()
        with _output_errors(final, "commit"):
            self._close_handles()
            fd = os.open(self._tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._tmp, final)
        self.files.append(final)
        self._tmp = None

    def _close_handles(self) -> None:
        if self._jsonl is not None:
            handle, self._jsonl = self._jsonl, None
            handle.close()
        if self._parquet is not None:
            writer, self._parquet = self._parquet, None
            writer.close()


def _remove_stale(folder: Path, keep: set[Path]) -> None:
    """Delete data files of an earlier export that this export did not rewrite (fewer files, other format)."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        is_ours = path.name.startswith((f"{TRAIN}-", f"{REJECTED}-")) and path.suffix in (".parquet", ".jsonl")
        if is_ours and path not in keep:
            with _output_errors(path, "remove the stale export file"):
                path.unlink()


@contextmanager
def _output_errors(path: Path | None, action: str) -> Iterator[None]:
    """OSError → OutputError naming the path and the action."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot {action} {path}: {exc.strerror or exc}") from exc
