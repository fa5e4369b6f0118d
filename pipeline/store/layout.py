"""The run directory's layout: the name of every file and folder under RUN_DIR, in one place.

    RUN_DIR/
      run.json            MANIFEST     the manifest (store/manifest.py)
      shards/*.parquet    SHARDS       accepted rows, committed parts
      rejects/*.parquet   REJECTS      rejected rows, committed parts
      journal/            JOURNAL      per-worker journals (store/journal.py)
      locks/              LOCKS        per-worker and rewrite locks (store/locks.py)
      metrics/            METRICS      one JSON line per second per worker (engine/ticker.py, `regen status`)
      heartbeats/         HEARTBEATS   one file per worker, rewritten every second (store/heartbeat.py)
      damaged/            DAMAGED      committed parts that could not be read, set aside (store/recovery.py)

Code names these through `RunLayout(run_dir)` or the constants, never as string literals, so a new folder or a
renamed one is one edit here (tests/test_architecture.py looks for literals elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MANIFEST = "run.json"
SHARDS = "shards"
REJECTS = "rejects"
JOURNAL = "journal"
LOCKS = "locks"
METRICS = "metrics"
HEARTBEATS = "heartbeats"
DAMAGED = "damaged"
PART_KINDS = (SHARDS, REJECTS)  # the folders of committed parts
MARKS = (MANIFEST, SHARDS, REJECTS, JOURNAL)  # any of these says a folder is a RUN_DIR


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def shards(self) -> Path:
        return self.root / SHARDS

    @property
    def rejects(self) -> Path:
        return self.root / REJECTS

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL

    @property
    def locks(self) -> Path:
        return self.root / LOCKS

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def heartbeats(self) -> Path:
        return self.root / HEARTBEATS

    @property
    def damaged(self) -> Path:
        return self.root / DAMAGED

    def parts(self, kind: str) -> Path:
        """The folder of committed parts of `kind` (SHARDS or REJECTS)."""
        if kind not in PART_KINDS:
            raise ValueError(f"not a kind of committed part: {kind!r}")
        return self.root / kind

    def worker_lock(self, worker: int) -> Path:
        return self.locks / f"worker-{worker}.lock"

    def metrics_file(self, worker: int) -> Path:
        return self.metrics / f"worker-{worker}.jsonl"

    def is_run_dir(self) -> bool:
        """Whether the folder holds anything a run writes first."""
        return any((self.root / mark).exists() for mark in MARKS)
