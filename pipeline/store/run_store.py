"""One worker's durable store over a RUN_DIR: journal, streamed parts, atomic commits, resume.

Life of a row: `add_accepted`/`add_rejected` encode it into an in-memory buffer (no I/O, safe on the event loop);
`sync()` appends the buffer to the journal and fsyncs it (now the row survives a SIGKILL), then hands the rows to
the part writers, which stream full row groups into hidden temp files. When a part reaches `shard_rows` rows, both
parts of that journal seq are committed (close, fsync, rename, fsync the directory) and the journal is rotated.
`close()` commits what is left. `open()` puts the RUN_DIR back into its invariant first: see `recovery`.

    RUN_DIR/locks/worker-{i}.lock              flock: one live process per worker index
    RUN_DIR/journal/worker-{i}.{seq}.jsonl     rows of part seq not yet committed
    RUN_DIR/shards/.worker-{i}-{seq}.parquet.tmp  →  shards/part-w{i}-{seq:05d}-{uuid8}.parquet
    RUN_DIR/rejects/ (likewise)

A run in a bucket (`remote.remote_of(run_dir)` is not None) runs the same way in its node-local working copy; in
addition open() takes the worker's lease in the bucket and pulls the committed parts first, every commit is pushed
(one commit-log record) before the journal rotates, and parts are committed at least every `remote_sync_s` so a lost
node (its journal with it) costs at most that much. See `remote`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OutputError
from ..records import Turn
from ..schema import reject_schema, shard_schema
from .doneset import DoneSet
from .durable import fsync_dir, output_errors
from .index import CommittedIndex
from .journal import ACCEPTED, REJECTED, TURN, JournalWriter, encode, list_journals, read_journal, read_turns, turn_line
from .layout import JOURNAL, LOCKS, REJECTS, SHARDS
from .lease import Lease
from .locks import FileLock, check_peers, take_worker_lock, worker_lock_path
from .partition import check_partition, id_hash, id_hashes, owns, owns_many
from .recovery import recover_journal, remove_ids, set_aside, settle
from .remote import RemoteRun, remote_of
from .shards import PartWriter, part_seqs, remove_tmp_files, tmp_workers, unstorable_reject


@dataclass(frozen=True, slots=True)
class ResumeState:
    """What open() found. `done` holds every id of the run that needs no more work (all workers' ids: filter
    with `owns`); `accepted`/`rejected` count this worker's share; `rejected_ids` are the ids only in rejects."""

    done: DoneSet
    accepted: int
    rejected: int
    rejected_ids: DoneSet
    total_accepted: int = 0
    total_rejected: int = 0
    recovered_rows: int = 0
    set_aside: list[dict[str, str]] = dataclasses.field(default_factory=list)  # damaged parts moved to damaged/
    # Finished turns of this worker's unfinished conversations: id -> [turn 0, turn 1, ...] (a contiguous prefix).
    partial: dict[str, list[Turn]] = dataclasses.field(default_factory=dict)


class RunStore:
    def __init__(
        self,
        run_dir: Path,
        *,
        worker_index: int,
        num_workers: int,
        keep_fields: Sequence[str],
        shard_rows: int = 10000,
        row_group_rows: int = 512,
        sync_interval_s: float = 1.0,
    ) -> None:
        check_partition(worker_index, num_workers)
        if shard_rows < 1 or row_group_rows < 1:
            raise ValueError("shard_rows and row_group_rows must be positive")
        self.run_dir = Path(run_dir)
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.shard_rows = shard_rows
        self.row_group_rows = min(row_group_rows, shard_rows)
        self.sync_interval_s = sync_interval_s
        self._schemas = {SHARDS: shard_schema(keep_fields), REJECTS: reject_schema(keep_fields)}
        self._buffer: list[tuple[str, dict[str, Any], bytes]] = []
        self._buffer_lock = threading.Lock()  # add_* on the event loop vs the sync thread
        self._io_lock = threading.Lock()  # one sync/commit at a time
        self._lock: FileLock | None = None
        self._journal: JournalWriter | None = None
        self._parts: dict[str, PartWriter] = {}
        self._retry_parts: dict[Path, np.ndarray] = {}  # retry_rejects: old rejects parts and their hashes
        self._open_turns: dict[str, list[bytes]] = {}  # journal lines of conversations not finished yet
        self._failed: OutputError | None = None
        self._closed = False
        self.aborted = False
        self._remote: RemoteRun | None = None
        self._lease: Lease | None = None
        self._last_commit = time.monotonic()

    # -- open / resume -------------------------------------------------------------------------------------------

    def open(self, *, retry_rejects: bool = False, move_foreign: bool = False) -> ResumeState:
        """Take this worker's lock, set damaged parts aside, recover journals, settle, and say what is done."""
        if self._lock is not None or self._closed:
            raise RuntimeError("a RunStore opens once")
        with output_errors(self.run_dir, "create the run directory"):
            for sub in (SHARDS, REJECTS, JOURNAL, LOCKS):
                (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        self._lock = take_worker_lock(self.run_dir, self.worker_index, self.num_workers)
        try:
            self._remote = remote_of(self.run_dir)
            if self._remote is not None:
                self._lease = self._remote.take_lease(f"worker-{self.worker_index}", num_workers=self.num_workers)
                self._remote.pull()
            check_peers(self.run_dir, self.worker_index, self.num_workers)
            state = self._resume(retry_rejects, move_foreign)
            if self._remote is not None:
                self._remote.push()  # what recovery and settling committed locally
                self._remote.clean_orphans({self.worker_index})
            self._last_commit = time.monotonic()
            return state
        except BaseException:
            self._release()
            raise

    def _resume(self, retry_rejects: bool, move_foreign: bool) -> ResumeState:
        index = CommittedIndex(self.run_dir)
        index.refresh()
        turns = read_turns(list_journals(self.run_dir / JOURNAL))  # before recovery deletes the journals ...
        # ... and written to this run's first journal before that: a kill during recovery loses no finished turn.
        self._journal = JournalWriter(self.run_dir / JOURNAL, self.worker_index, self._next_seq())
        mine = [(i, by_k) for i, by_k in turns.items() if owns(id_hash(i), self.worker_index, self.num_workers)]
        self._journal.append([turn_line(i, k, t) for i, by_k in mine for k, t in sorted(by_k.items())])
        moved: list[dict[str, str]] = []
        if index.damaged:
            moved = set_aside(self.run_dir, list(index.damaged.values()), move_foreign=move_foreign)
            index.refresh()
        committed = {SHARDS: index.done(SHARDS), REJECTS: index.done(REJECTS)}
        recovered = self._recover_worker(self.worker_index, committed)
        for worker in sorted(self._other_workers()):
            lock = FileLock(worker_lock_path(self.run_dir, worker))
            if lock.acquire(role="recovering"):
                try:
                    recovered += self._recover_other(worker, committed)
                finally:
                    lock.release()
        del committed  # two done sets of the whole run: not needed past recovery
        index.refresh()
        settle(self.run_dir, index)
        # Journals before committed parts: a row moving from one to the other meanwhile is seen at least once.
        live = id_hashes(e.row["id"] for j in list_journals(self.run_dir / JOURNAL) for e in read_journal(j.path))
        index.refresh()
        state = self._resume_state(index, live, retry_rejects, recovered)
        partial = self._partial(turns, state.done)
        state = dataclasses.replace(state, set_aside=moved, partial=partial)
        # Retried ids leave their old rejects part once committed again: every reject with --retry-rejects, else
        # the retryable ones (a transport failure is not a verdict on the prompt).
        self._retry_parts = {
            p.path: p.hashes if retry_rejects else p.retryable
            for p in index.parts.values()
            if p.kind == REJECTS and (retry_rejects or len(p.retryable))
        }
        self._open_turns = {i: [turn_line(i, k, t) for k, t in enumerate(ts)] for i, ts in partial.items()}
        self._new_parts(self._journal.seq)
        return state

    def _partial(self, turns: dict[str, dict[int, Turn]], done: DoneSet) -> dict[str, list[Turn]]:
        """The journaled turns this worker will resume: its own ids, not finished, from turn 0 without a gap."""
        out: dict[str, list[Turn]] = {}
        for prompt_id, by_k in turns.items():
            h = id_hash(prompt_id)
            if h in done or not owns(h, self.worker_index, self.num_workers):
                continue
            prefix: list[Turn] = []
            while len(prefix) in by_k:
                prefix.append(by_k[len(prefix)])
            if prefix:
                out[prompt_id] = prefix
        return out

    def _recover_worker(self, worker: int, committed: dict[str, DoneSet]) -> int:
        """Recover every journal and temp file of `worker`, whose lock the caller holds."""
        for kind in (SHARDS, REJECTS):
            remove_tmp_files(self.run_dir / kind, worker)
        journals = [j for j in list_journals(self.run_dir / JOURNAL) if j.worker == worker]
        if self._journal is not None and worker == self.worker_index:  # not the journal this open() started
            journals = [j for j in journals if j.seq < self._journal.seq]
        return sum(recover_journal(self.run_dir, j, committed, self._schemas, self.row_group_rows) for j in journals)

    def _recover_other(self, worker: int, committed: dict[str, DoneSet]) -> int:
        """Recover another worker's journal left in this copy; for a run in a bucket only under that worker's lease
        (it may be running on another node: then its journal here waits for a later open)."""
        if self._remote is None:
            return self._recover_worker(worker, committed)
        taken = self._remote.try_lease(f"worker-{worker}", role="recovering")
        if taken is None:
            return 0
        try:
            return self._recover_worker(worker, committed)
        finally:
            taken.release()

    def _other_workers(self) -> set[int]:
        workers = {j.worker for j in list_journals(self.run_dir / JOURNAL)}
        for kind in (SHARDS, REJECTS):
            workers |= tmp_workers(self.run_dir / kind)
        workers.discard(self.worker_index)
        return workers

    def _resume_state(
        self, index: CommittedIndex, live: np.ndarray, retry_rejects: bool, recovered: int
    ) -> ResumeState:
        # After settle every id is committed once, so the per-part arrays add up without building another
        # sorted set of the whole run: one concatenation and one sort make the done set (8 MB per million ids).
        shard_parts = [p.hashes for p in index.parts.values() if p.kind == SHARDS]
        rejected = index.done(REJECTS)
        if not retry_rejects and len(retryable := index.retryable()):
            rejected = DoneSet(np.setdiff1d(rejected.to_array(), retryable), owned=True)
        parts = [*shard_parts, live] + ([] if retry_rejects else [rejected.to_array()])
        mine = (self.worker_index, self.num_workers)
        return ResumeState(
            done=DoneSet(np.concatenate(parts), owned=True),
            accepted=sum(int(owns_many(h, *mine).sum()) for h in shard_parts),
            rejected=int(owns_many(rejected.to_array(), *mine).sum()),
            rejected_ids=rejected,
            total_accepted=sum(len(h) for h in shard_parts),
            total_rejected=len(rejected),
            recovered_rows=recovered,
        )

    def _next_seq(self) -> int:
        seqs = [j.seq for j in list_journals(self.run_dir / JOURNAL) if j.worker == self.worker_index]
        for kind in (SHARDS, REJECTS):
            seqs += part_seqs(self.run_dir / kind, self.worker_index)
        return max(seqs, default=-1) + 1

    def _new_parts(self, seq: int) -> None:
        rejects = PartWriter(
            self.run_dir / REJECTS, self._schemas[REJECTS], self.worker_index, seq, self.row_group_rows
        )
        self._parts = {
            SHARDS: PartWriter(
                self.run_dir / SHARDS,
                self._schemas[SHARDS],
                self.worker_index,
                seq,
                self.row_group_rows,
                on_unstorable=lambda row, error: rejects.add(unstorable_reject(row, error)),
            ),
            REJECTS: rejects,
        }

    # -- rows ----------------------------------------------------------------------------------------------------

    def add_accepted(self, row: dict[str, Any]) -> None:
        self._add(ACCEPTED, row)

    def add_rejected(self, row: dict[str, Any]) -> None:
        self._add(REJECTED, row)

    def add_turn(self, prompt_id: str, k: int, turn: Turn) -> None:
        """Journal turn `k` of a conversation whose row is not finished: a crash keeps it (within ~1 s like rows),
        and the next open() hands it back in `ResumeState.partial`."""
        self._check_usable()
        line = turn_line(prompt_id, k, turn)
        with self._buffer_lock:
            self._open_turns.setdefault(prompt_id, []).append(line)
            self._buffer.append((TURN, {}, line))  # journaled only: no part holds a turn

    def _add(self, kind: str, row: dict[str, Any]) -> None:
        self._check_usable()
        line = encode(kind, row)
        with self._buffer_lock:
            self._open_turns.pop(row["id"], None)
            self._buffer.append((kind, row, line))

    @property
    def buffered_rows(self) -> int:
        """Rows held in memory: not yet journaled, or journaled and waiting for a full row group."""
        return len(self._buffer) + sum(p.pending for p in self._parts.values())

    @property
    def needs_sync(self) -> bool:
        """More rows are waiting than one row group: sync now rather than at the next interval."""
        return len(self._buffer) >= self.row_group_rows

    # -- sync / commit -------------------------------------------------------------------------------------------

    async def sync(self) -> None:
        await asyncio.to_thread(self.sync_blocking)

    def sync_blocking(self) -> None:
        """Make every row added so far durable in the journal; stream and commit parts as they fill."""
        self._check_usable()
        with self._io_lock:
            with self._buffer_lock:
                batch, self._buffer = self._buffer, []
            try:
                self._write(batch)
                if self._remote is not None and time.monotonic() - self._last_commit >= self._remote.remote_sync_s:
                    if any(p.rows for p in self._parts.values()):
                        self._commit()  # a small part now: a lost node costs at most remote_sync_s of rows
            except OutputError as exc:
                self._failed = exc
                raise

    def _write(self, batch: list[tuple[str, dict[str, Any], bytes]]) -> None:
        assert self._journal is not None
        start = 0
        while start < len(batch):
            end = self._chunk_end(batch, start)
            self._journal.append([line for _, _, line in batch[start:end]])
            for kind, row, _ in batch[start:end]:
                if kind == TURN:
                    continue
                part = self._parts[SHARDS if kind == ACCEPTED else REJECTS]
                part.add(row)
                part.write_full_groups()
            if any(p.rows >= self.shard_rows for p in self._parts.values()):
                self._commit()
            start = end

    def _chunk_end(self, batch: list[tuple[str, dict[str, Any], bytes]], start: int) -> int:
        """End of the rows that fit in the current parts: a journal seq never spans two parts."""
        room = {kind: self.shard_rows - part.rows for kind, part in self._parts.items()}
        for i in range(start, len(batch)):
            if batch[i][0] == TURN:
                continue
            kind = SHARDS if batch[i][0] == ACCEPTED else REJECTS
            room[kind] -= 1
            if room[kind] == 0:
                return i + 1
        return len(batch)

    def _commit(self) -> None:
        """Commit both parts of the current seq, then rotate the journal. Crash-safe at every step."""
        assert self._journal is not None
        if self._lease is not None:
            self._lease.check()
        committed: list[str] = []
        for kind, part in self._parts.items():
            if part.commit() is not None:
                with output_errors(self.run_dir / kind, "sync the directory"):
                    fsync_dir(self.run_dir / kind)
                committed += part.ids
        if self._remote is not None:
            self._remote.push()  # before the journal goes: until the bucket has them, the journal keeps the rows
        self._last_commit = time.monotonic()
        with self._buffer_lock:
            carry = [line for lines in self._open_turns.values() for line in lines]
        self._journal.rotate(carry)
        self._new_parts(self._journal.seq)
        if self._retry_parts and committed:
            self._leave_rejects(id_hashes(committed))

    def _leave_rejects(self, hashes: np.ndarray) -> None:
        """Retried ids now committed again leave their old rejects parts (a crash here is settled on open)."""
        moved = {path: old[np.isin(old, hashes)] for path, old in self._retry_parts.items()}
        moved = {path: m for path, m in moved.items() if len(m)}
        if not moved:
            return
        remove_ids(self.run_dir, list(moved), np.concatenate(list(moved.values())))
        for path, m in moved.items():
            self._retry_parts[path] = np.setdiff1d(self._retry_parts[path], m)

    # -- close ---------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Sync, commit the partial parts, delete the journal, release the lock. After a failed sync, only
        releases: the journal keeps every synced row for the next open()."""
        if self._closed or self._lock is None:
            self._closed = True
            return
        try:
            if self._failed is None:
                self.sync_blocking()
                with self._io_lock:
                    if any(p.rows for p in self._parts.values()):
                        self._commit()
        finally:
            self._release()

    def abort(self) -> None:
        """Stop without committing, as a crash would (the journal is recovered by the next open())."""
        self.aborted = True
        for part in self._parts.values():
            part.discard()
        self._release()

    def _release(self) -> None:
        self._closed = True
        if self._journal is not None:
            self._journal.close()
        held = self._lease is not None and self._lease.held
        if self._remote is not None and held and self._failed is None and not self.aborted:
            try:
                self._remote.push()  # rejects rewritten after the last commit (retried ids that left them)
            except OutputError as exc:
                self._failed = exc
        if self._lease is not None:
            self._lease.release()
        if self._lock is not None:
            self._lock.release()

    def _check_usable(self) -> None:
        if self._failed is not None:
            # the same class: an outage stays exit 3, not a generic output error
            raise type(self._failed)(f"the store stopped after an earlier error: {self._failed}")
        if self._lease is not None:
            self._lease.check()
        if self._lock is None or self._closed:
            raise RuntimeError("RunStore is not open (call open() first; a closed store cannot be reused)")

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
