"""Putting a RUN_DIR back into its invariant after a crash: every id in exactly one committed row.

Two steps, both idempotent, so a crash during recovery is recovered by the next open():

- `recover_journal` commits the rows of a dead worker's journal that are not committed yet (a crash between a
  part's rename and the journal's rotation leaves rows in both), then deletes the journal. An accepted row is
  skipped only if its id is in shards/ (shards win: a retried reject that succeeded must not be lost); a rejected
  row is skipped if its id is in shards/ or rejects/.
- `settle` removes the duplicates a crash can leave between a commit and the rewrite that follows it (a retried
  id that is now in a new part and still in its old rejects part): a shard row beats any reject row, the newest
  reject row (by `created_at`) beats older ones. It runs under the rewrite lock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .doneset import DoneSet
from .durable import fsync_dir, output_errors, unlink_quiet
from .index import CommittedIndex
from .journal import ACCEPTED, JournalFile, read_journal
from .locks import FileLock, rewrite_lock_path
from .partition import id_hash, id_hashes
from .shards import (
    REJECTS,
    SHARDS,
    PartWriter,
    drop_hashes,
    remove_rewrite_tmp_files,
    rewrite_without,
    unstorable_reject,
)


def recover_journal(
    run_dir: Path,
    journal: JournalFile,
    committed: dict[str, DoneSet],
    schemas: dict[str, pa.Schema],
    row_group_rows: int,
) -> int:
    """Commit the rows of `journal` that are not in `committed` ({SHARDS: ..., REJECTS: ...}, updated with what
    this commits), then delete the journal. Returns the rows committed. The caller holds `journal.worker`'s lock.
    """
    rejects = PartWriter(run_dir / REJECTS, schemas[REJECTS], journal.worker, journal.seq, row_group_rows)
    shards = PartWriter(
        run_dir / SHARDS,
        schemas[SHARDS],
        journal.worker,
        journal.seq,
        row_group_rows,
        on_unstorable=lambda row, error: rejects.add(unstorable_reject(row, error)),
    )
    seen: set[int] = set()
    for entry in read_journal(journal.path):
        h = id_hash(entry.row["id"])
        if h in seen or h in committed[SHARDS] or (entry.kind != ACCEPTED and h in committed[REJECTS]):
            continue
        seen.add(h)
        writer = shards if entry.kind == ACCEPTED else rejects
        writer.add(entry.row)
        writer.write_full_groups()
    for kind, writer in ((SHARDS, shards), (REJECTS, rejects)):
        if writer.commit() is not None:
            with output_errors(run_dir / kind, "sync the directory"):
                fsync_dir(run_dir / kind)
            for h in id_hashes(writer.ids).tolist():
                committed[kind].add(h)
    with output_errors(journal.path, "delete the recovered journal"):
        unlink_quiet(journal.path)
        fsync_dir(journal.path.parent)
    return len(seen)


def settle(run_dir: Path, index: CommittedIndex) -> int:
    """Remove duplicate ids across committed parts; returns the rows removed (normally 0, and cheap then)."""
    if len(index.duplicated()) == 0:
        return 0
    with FileLock(rewrite_lock_path(run_dir)):
        for kind in (SHARDS, REJECTS):
            remove_rewrite_tmp_files(run_dir / kind)
        index.refresh()
        dups = index.duplicated()
        if len(dups) == 0:
            return 0
        losers = _losers(index, dups)
        removed = 0
        for path, rows in losers.items():
            removed += rewrite_without(path, _drop_rows(rows)).dropped
        index.refresh()
        return removed


def remove_ids(run_dir: Path, paths: list[Path], hashes: np.ndarray) -> int:
    """Remove the rows whose id hashes into `hashes` from committed parts `paths` (under the rewrite lock)."""
    removed = 0
    with FileLock(rewrite_lock_path(run_dir)):
        for path in paths:
            if path.exists():
                removed += rewrite_without(path, drop_hashes(hashes)).dropped
    return removed


def _losers(index: CommittedIndex, dups: np.ndarray) -> dict[Path, list[int]]:
    """For each duplicated id, every row but the winner, as {path: [row index]}."""
    candidates: dict[str, list[tuple[tuple[int, int, str], Path, int]]] = defaultdict(list)
    for path in index.files_with(dups):
        kind = index.parts[path].kind
        columns = ["id"] if kind == SHARDS else ["id", "created_at"]
        table = pq.ParquetFile(path).read(columns=columns)
        ids = table.column("id").to_pylist()
        created = (
            table.column("created_at").cast(pa.int64()).fill_null(0).to_pylist() if kind == REJECTS else [0] * len(ids)
        )
        for row in np.flatnonzero(np.isin(id_hashes(ids), dups)).tolist():
            # Sort key, smallest wins: any shard row first (earliest file), then the newest reject row.
            key = (0, 0, path.name) if kind == SHARDS else (1, -created[row], path.name)
            candidates[ids[row]].append((key, path, row))
    losers: dict[Path, list[int]] = defaultdict(list)
    for rows in candidates.values():
        for _, path, row in sorted(rows)[1:]:
            losers[path].append(row)
    return losers


def _drop_rows(rows: list[int]) -> Callable[[pa.Table], np.ndarray]:
    def drop(table: pa.Table) -> np.ndarray:
        mask = np.zeros(len(table), dtype=bool)
        mask[rows] = True
        return mask

    return drop
