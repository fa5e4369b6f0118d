"""Committed files of a RUN_DIR: which ones there are, how one comes into being, how one is rewritten.

This module is the one place that knows the commit protocol on a local or shared filesystem:
- a file is written under a hidden name (`.name.tmp`), fsynced, then renamed into place, and the directory fsynced;
- every visible `*.parquet` under shards/ or rejects/ is therefore complete, and is what every reader lists
  (resume, status, inspect, validate, export, merge, card);
- a committed file is rewritten (rows dropped by recovery, merge or quarantine) only by `rewrite_without`, under
  the rewrite lock (`locks.rewrite_lock`), into a `.rewrite-*.tmp` file that only a holder of that lock removes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from .durable import fsync_dir, fsync_file, output_errors, unlink_quiet
from .layout import REJECTS, SHARDS
from .partition import id_hashes

REWRITE_TMP_PREFIX = ".rewrite-"
# Temp names of rewrites by regen versions before the store owned every rewrite; removed the same way.
_OLD_REWRITE_TMP_PREFIXES = (".quarantine-", ".merge-")
QUARANTINE_PREFIX = "quarantine-"  # rejects moved out of shards by `regen validate --quarantine`
COMPRESSION = "zstd"
# Long, unique text: a dictionary never pays (the writer hashes every value, then falls back to plain) and min/max
# statistics of 7 KB strings help no query. Skipping both halves the CPU of a row group write (33 -> 18 us per
# 7 KB row, files ~3% smaller). `id` keeps its statistics for filter pushdown in DuckDB and pyarrow.
_LONG_TEXT = frozenset({"messages", "reasoning", "answer", "detail"})
_NO_DICTIONARY = frozenset({"id"})

Drop = Callable[[pa.Table, int], np.ndarray]  # (row group, its first row's index in the file) -> rows to drop


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """ParquetWriter keywords for a RUN_DIR table of `schema`: zstd; no dictionary or statistics on long text."""
    dictionary = [f.name for f in schema if f.name not in _LONG_TEXT and f.name not in _NO_DICTIONARY]
    if "messages" in schema.names:
        dictionary.append("messages.list.element.role")
    statistics = [f.name for f in schema if f.name not in _LONG_TEXT]
    return {"compression": COMPRESSION, "use_dictionary": dictionary, "write_statistics": statistics}


# ---------------------------------------------------------------- listing


def visible_files(folder: Path, suffix: str) -> list[Path]:
    """The files of `folder` ending in `suffix` that are not hidden and not being written, sorted by name."""
    if not folder.is_dir():
        return []
    names = (e.name for e in os.scandir(folder) if e.is_file())
    return [folder / n for n in sorted(names) if n.endswith(suffix) and not n.startswith(".")]


def committed_parts(folder: Path) -> list[Path]:
    """The committed Parquet files of shards/ or rejects/, sorted by name: the one listing every reader uses."""
    return visible_files(folder, ".parquet")


@dataclass(frozen=True)
class DataFile:
    """One committed parquet file: where it is, whether it holds rejects, and its row-group row counts."""

    path: Path
    rejects: bool
    row_groups: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def rows(self) -> int:
        return sum(self.row_groups)


@dataclass(frozen=True)
class Damaged:
    """A file under shards/ or rejects/ that cannot be read as a committed part, and why.

    `foreign` files were never written by regen (not Parquet at all, or Parquet without an `id` column): they are
    reported, and moved aside only when the user says so. Other damage (a truncated or corrupted part) is set
    aside by `regen run`, whose ids then simply become pending again.
    """

    path: Path
    problem: str
    foreign: bool

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


PARQUET_MAGIC = b"PAR1"


def data_file(path: Path, rejects: bool) -> DataFile:
    meta = pq.ParquetFile(path).metadata
    groups = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    return DataFile(path, rejects, groups)


def open_part(path: Path, rejects: bool) -> DataFile | Damaged:
    """The part at `path` with its row groups, or what is wrong with it. FileNotFoundError passes through
    (a concurrent rewrite removed it: the caller decides)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
        if len(head) < len(PARQUET_MAGIC) and PARQUET_MAGIC.startswith(head):  # zero bytes, or cut in the magic
            return Damaged(path, f"{len(head)} bytes; truncated", foreign=False)
        if head != PARQUET_MAGIC:
            return Damaged(path, "not a Parquet file", foreign=True)
        pfile = pq.ParquetFile(path)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        return Damaged(path, f"unreadable Parquet ({_short(exc)}); truncated or corrupted", foreign=False)
    if "id" not in pfile.schema_arrow.names:
        return Damaged(path, "Parquet without an `id` column: not a part regen wrote", foreign=True)
    meta = pfile.metadata
    return DataFile(path, rejects, tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups)))


def data_files(run_dir: Path, kind: str) -> tuple[list[DataFile], list[Damaged]]:
    """The readable committed parts of shards/ or rejects/, and the damaged ones."""
    good: list[DataFile] = []
    bad: list[Damaged] = []
    for path in committed_parts(run_dir / kind):
        try:
            part = open_part(path, kind == REJECTS)
        except FileNotFoundError:
            continue
        if isinstance(part, DataFile):
            good.append(part)
        else:
            bad.append(part)
    return good, bad


def shard_files(run_dir: Path) -> list[DataFile]:
    return data_files(run_dir, SHARDS)[0]


def reject_files(run_dir: Path) -> list[DataFile]:
    return data_files(run_dir, REJECTS)[0]


def damaged_parts(run_dir: Path) -> list[Damaged]:
    """Every file under shards/ and rejects/ that cannot be read as a committed part."""
    return data_files(run_dir, SHARDS)[1] + data_files(run_dir, REJECTS)[1]


def readable_parts(folder: Path) -> list[Path]:
    """`committed_parts` minus the damaged ones (readers that work on the rest; see `damaged_parts`)."""
    return [f.path for f in data_files(folder.parent, folder.name)[0]]


def damage_note(damaged: Damaged) -> str:
    """One damaged part for a partial export's record: `shards/NAME: problem (what it held)`."""
    return f"{damaged.path.parent.name}/{damaged.path.name}: {damaged.problem} ({held_ids(damaged)})"


def held_ids(damaged: Damaged, shown: int = 5) -> str:
    """What a damaged part held, as far as it can still be read: its ids (the first `shown` of them), or why not."""
    try:
        ids = read_ids(damaged.path)
    except (OSError, pa.ArrowException):
        return "its ids cannot be read"
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return f"{len(ids)} rows: {', '.join(ids[:shown])}{more}"


def refuse_partial(run_dir: Path, kinds: list[str], *, partial: bool) -> list[Damaged]:
    """The damaged committed parts of `kinds` (shards, rejects); InputError naming each and what it held unless
    the user asked for a partial export."""
    damaged = [d for d in damaged_parts(run_dir) if d.path.parent.name in kinds]
    if damaged and not partial:
        named = "; ".join(f"{d} ({held_ids(d)})" for d in damaged)
        raise InputError(
            f"{run_dir}: {len(damaged)} committed parts cannot be read, so an export would miss their rows: "
            f"{named}. Rerun `regen run` with the run's config to set them aside and regenerate their ids, or pass "
            "--partial to export the rest (the dataset card then lists what is missing)"
        )
    return damaged


def read_ids(path: Path) -> list[str]:
    """The `id` column of one committed part (no other column is read)."""
    result: list[str] = pq.ParquetFile(path).read(columns=["id"]).column("id").to_pylist()
    return result


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# ---------------------------------------------------------------- committing


def commit(tmp: Path, target: Path, *, sync_dir: bool = True) -> None:
    """Make the finished hidden file `tmp` visible as `target`: fsync, rename, and (unless the caller syncs the
    directory once for several commits) fsync the directory."""
    fsync_file(tmp)
    os.replace(tmp, target)
    if sync_dir:
        fsync_dir(target.parent)


def write_committed(table: pa.Table, target: Path, *, row_group_rows: int = 512) -> None:
    """Write `table` as the committed file `target` (hidden temp file, then `commit`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{REWRITE_TMP_PREFIX}{target.name}.tmp")
    with output_errors(target, "write the committed file"):
        pq.write_table(table, tmp, row_group_size=row_group_rows, **parquet_options(table.schema))
        commit(tmp, target)


# ---------------------------------------------------------------- rewriting


@dataclass(frozen=True, slots=True)
class Rewrite:
    path: Path
    kept: int
    dropped: int


def rewrite_without(path: Path, drop: Drop) -> Rewrite:
    """Atomically replace a committed part by itself minus the rows where `drop` is True.

    Streamed one row group at a time into a hidden temp file, fsynced, renamed over the original (deleted if no
    row is left): readers see the old file or the new one, never a mix. The caller holds the rewrite lock.
    """
    pfile = pq.ParquetFile(path)
    masks, start = [], 0
    for group in range(pfile.num_row_groups):
        table = pfile.read_row_group(group)
        masks.append(np.asarray(drop(table, start), dtype=bool))
        start += len(table)
    dropped = int(sum(m.sum() for m in masks))
    if dropped == 0:
        return Rewrite(path, start, 0)
    kept = start - dropped
    tmp = path.with_name(f"{REWRITE_TMP_PREFIX}{path.name}.tmp")
    with output_errors(path, "rewrite the committed part"):
        if kept == 0:
            path.unlink()
            fsync_dir(path.parent)
            return Rewrite(path, 0, dropped)
        with pq.ParquetWriter(tmp, pfile.schema_arrow, **parquet_options(pfile.schema_arrow)) as writer:
            for group, mask in enumerate(masks):
                table = pfile.read_row_group(group).filter(pa.array(~mask))
                if len(table):
                    writer.write_table(table, row_group_size=len(table))
        commit(tmp, path)
    return Rewrite(path, kept, dropped)


def remove_rewrite_tmp_files(directory: Path) -> None:
    """Delete temp files of interrupted rewrites; only the holder of the rewrite lock may call this."""
    if not directory.is_dir():
        return
    with output_errors(directory, "remove orphan temp files in"):
        for entry in os.scandir(directory):
            if entry.name.startswith((REWRITE_TMP_PREFIX, *_OLD_REWRITE_TMP_PREFIXES)) and entry.name.endswith(".tmp"):
                unlink_quiet(Path(entry.path))


def drop_hashes(hashes: np.ndarray) -> Drop:
    """A `drop` predicate for `rewrite_without`: rows whose id hashes into `hashes`."""

    def drop(table: pa.Table, start: int) -> np.ndarray:
        return np.isin(id_hashes(table.column("id").to_pylist()), hashes)

    return drop


def drop_ids(ids: Iterable[str]) -> Drop:
    """A `drop` predicate for `rewrite_without`: rows whose id is one of `ids`."""
    import pyarrow.compute as pc  # here, not at the top: 20-40 ms of every `regen run` start, which never needs it

    value_set = pa.array(list(ids), pa.string())

    def drop(table: pa.Table, start: int) -> np.ndarray:
        result: np.ndarray = pc.is_in(table.column("id"), value_set=value_set).to_numpy(zero_copy_only=False)
        return result

    return drop


def drop_rows(rows: Iterable[int]) -> Drop:
    """A `drop` predicate for `rewrite_without`: rows at these positions in the file."""
    positions = np.asarray(sorted(rows), dtype=np.int64)

    def drop(table: pa.Table, start: int) -> np.ndarray:
        mask = np.zeros(len(table), dtype=bool)
        mine = positions[(positions >= start) & (positions < start + len(table))]
        mask[mine - start] = True
        return mask

    return drop
