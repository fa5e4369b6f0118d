"""Putting a RUN_DIR back into its invariant after a crash: every id in exactly one committed row.

Two steps, both idempotent, so a crash during recovery is recovered by the next open():

- `recover_journal` commits the rows of a dead worker's journal that are not committed yet (a crash between a
  part's rename and the journal's rotation leaves rows in both), then deletes the journal. An accepted row is
  skipped only if its id is in shards/ (shards win: a retried reject that succeeded must not be lost); a rejected
  row is skipped if its id is in shards/ or rejects/.
- `settle` first finishes a `regen merge` that a crash interrupted (its outputs duplicate its inputs until it
  is rolled forward or back, and those must not be settled as ordinary duplicates), then removes the duplicates
  a crash can leave between a commit and the rewrite that follows it (a retried id that is now in a new part and
  still in its old rejects part): a shard row beats any reject row, the newest reject row (by `created_at`) beats
  older ones. One exception: a `rejects/quarantine-*.parquet` row (written by `regen validate --quarantine`
  before it rewrites the shard) beats the shard row it was copied from, so a quarantine interrupted between its
  two steps is completed, not undone. The copy keeps the shard row's `created_at`; a shard row strictly newer
  than the quarantined one is a retry accepted since (`--retry-rejects`), and wins. It runs under the rewrite
  lock.

A committed file that cannot be read (truncated, corrupted) is moved to RUN_DIR/damaged/ by `set_aside` and its
ids become pending, so the next run regenerates them; a foreign file stops the run unless the user allows the move.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from . import merge
from .doneset import DoneSet
from .durable import fsync_dir, output_errors, unlink_quiet
from .files import (
    QUARANTINE_PREFIX,
    Damaged,
    drop_hashes,
    drop_rows,
    remove_rewrite_tmp_files,
    rewrite_without,
)
from .index import CommittedIndex
from .journal import ACCEPTED, KINDS, TURN, JournalFile, read_journal
from .layout import (
    DAMAGED,  # committed files that could not be read, set aside by `regen run`
    REJECTS,
    SHARDS,
)
from .locks import rewrite_lock
from .manifest import record_set_aside
from .partition import id_hash, id_hashes
from .shards import PartWriter, unstorable_reject

log = logging.getLogger(__name__)


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
    readable = False
    for entry in read_journal(journal.path, (*KINDS, TURN)):
        readable = True
        if entry.kind == TURN:
            continue  # turns of open conversations: RunStore.open read them before recovery
        h = id_hash(entry.row["id"])
        if h in seen or h in committed[SHARDS] or (entry.kind != ACCEPTED and h in committed[REJECTS]):
            continue
        seen.add(h)
        writer = shards if entry.kind == ACCEPTED else rejects
        writer.add(entry.row)
        writer.write_full_groups()
    if not readable and journal.path.stat().st_size > 0:
        log.warning(
            "%s: journal has no readable line (%d bytes of garbage); ignored and deleted",
            journal.path,
            journal.path.stat().st_size,
            extra={"event": "journal_unreadable", "path": str(journal.path)},
        )
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
    """Finish an interrupted merge, then remove duplicate ids across committed parts; returns the rows removed
    (normally 0, and cheap then)."""
    if len(index.duplicated()) == 0 and not (run_dir / merge.PLAN).exists():
        return 0
    with rewrite_lock(run_dir):
        with output_errors(run_dir / merge.PLAN, "finish the interrupted merge"):
            merge.finish_interrupted_merge(run_dir)
        for kind in (SHARDS, REJECTS):
            remove_rewrite_tmp_files(run_dir / kind)
        index.refresh()
        dups = index.duplicated()
        if len(dups) == 0:
            return 0
        losers = _losers(index, dups)
        removed = 0
        for path, rows in losers.items():
            removed += rewrite_without(path, drop_rows(rows)).dropped
        index.refresh()
        return removed


def remove_ids(run_dir: Path, paths: list[Path], hashes: np.ndarray) -> int:
    """Remove the rows whose id hashes into `hashes` from committed parts `paths` (under the rewrite lock)."""
    removed = 0
    with rewrite_lock(run_dir):
        for path in paths:
            if path.exists():
                removed += rewrite_without(path, drop_hashes(hashes)).dropped
    return removed


@dataclass(frozen=True, slots=True, order=True)
class _Copy:
    """One committed row of a duplicated id. Sort order, smallest wins: shard rows (earliest file), then reject
    rows, newest first."""

    rank: int  # 0 shard, 1 reject
    newest_first: int  # -created_at for rejects, 0 for shards
    name: str
    path: Path
    row: int
    created: int
    quarantined: bool


def _losers(index: CommittedIndex, dups: np.ndarray) -> dict[Path, list[int]]:
    """For each duplicated id, every row but the winner, as {path: [row index]}."""
    candidates: dict[str, list[_Copy]] = defaultdict(list)
    for path in index.files_with(dups):
        kind = index.parts[path].kind
        table = pq.ParquetFile(path).read(columns=["id", "created_at"])
        ids = table.column("id").to_pylist()
        created = table.column("created_at").cast(pa.int64()).fill_null(0).to_pylist()
        quarantined = kind == REJECTS and path.name.startswith(QUARANTINE_PREFIX)
        for row in np.flatnonzero(np.isin(id_hashes(ids), dups)).tolist():
            rank, newest_first = (0, 0) if kind == SHARDS else (1, -created[row])
            copy = _Copy(rank, newest_first, path.name, path, row, created[row], quarantined)
            candidates[ids[row]].append(copy)
    losers: dict[Path, list[int]] = defaultdict(list)
    for copies in candidates.values():
        winner = _winner(copies)
        for copy in copies:
            if copy is not winner:
                losers[copy.path].append(copy.row)
    return losers


def _winner(copies: list[_Copy]) -> _Copy:
    """Shards win, unless a quarantined copy is at least as new as every shard copy (see the module docstring)."""
    best = min(copies)
    quarantined = [c for c in copies if c.quarantined]
    if best.rank == 0 and quarantined:
        newest = max(quarantined, key=lambda c: (c.created, c.name))
        if newest.created >= max(c.created for c in copies if c.rank == 0):
            return newest
    return best


def set_aside(run_dir: Path, damaged: list[Damaged], *, move_foreign: bool) -> list[dict[str, str]]:
    """Move committed files that cannot be read into RUN_DIR/damaged/ (their ids become pending again) and record
    each move in run.json. A foreign file is an InputError naming it, unless `move_foreign`.

    Returns the moves as `{from, to, problem}`.
    """
    foreign = [d for d in damaged if d.foreign]
    if foreign and not move_foreign:
        names = "\n".join(f"  {d}" for d in foreign)
        raise InputError(
            f"{run_dir}: files that regen did not write sit among the committed parts:\n{names}\n"
            "Move them out of shards/ and rejects/, or rerun with --move-foreign to have regen move them to "
            f"{run_dir / DAMAGED}/"
        )
    moves: list[dict[str, str]] = []
    with rewrite_lock(run_dir):
        for d in damaged:
            if not d.path.exists():
                continue  # another worker set it aside first
            target = _free_name(run_dir / DAMAGED, f"{d.path.parent.name}-{d.path.name}")
            with output_errors(d.path, "move the damaged part aside"):
                target.parent.mkdir(exist_ok=True)
                os.replace(d.path, target)
                fsync_dir(d.path.parent)
                fsync_dir(target.parent)
            moves.append(
                {"from": str(d.path.relative_to(run_dir)), "to": str(target.relative_to(run_dir)), "problem": d.problem}
            )
    if moves:
        record_set_aside(run_dir, moves)
    return moves


def _free_name(folder: Path, name: str) -> Path:
    target, n = folder / name, 1
    while target.exists():
        target, n = folder / f"{name}.{n}", n + 1
    return target
