"""What is committed: the id hashes of every part under shards/ and rejects/, read from the `id` column only.

`CommittedIndex` caches one hash array per file and rereads only files that appeared or changed since the last
`refresh()`, so open() scans 1M committed rows once even though it refreshes after each recovery step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .doneset import DoneSet, sorted_unique
from .files import Damaged, DataFile, committed_parts, open_part, read_ids
from .layout import REJECTS, SHARDS
from .partition import id_hashes


@dataclass(frozen=True, slots=True)
class PartIds:
    path: Path
    kind: str  # SHARDS or REJECTS
    hashes: np.ndarray
    stamp: tuple[int, int, int]
    retryable: np.ndarray  # rejects whose reason is not a verdict on the prompt (RETRYABLE_REASONS): pending again


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# Reject reasons that say nothing about the prompt: the servers or the network failed it (transport errors, 5xx,
# endpoints going down used up its attempts). A later run retries them without being asked; verdicts stay.
RETRYABLE_REASONS = ("exhausted_retries",)


def _read_hashes(path: Path, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The id hashes of a part, and for a rejects part those of its retryable rows (ids and reasons only)."""
    if kind != REJECTS:
        return id_hashes(read_ids(path)), _NONE
    table = pq.ParquetFile(path).read(columns=["id", "reason"])
    hashes = id_hashes(table.column("id").to_pylist())
    reasons = table.column("reason").to_pylist()
    retry = np.fromiter((r in RETRYABLE_REASONS for r in reasons), dtype=bool, count=len(reasons))
    return hashes, hashes[retry]


_NONE = np.empty(0, dtype=np.uint64)


class CommittedIndex:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.parts: dict[Path, PartIds] = {}
        self.damaged: dict[Path, Damaged] = {}  # committed files that cannot be read; their ids count as pending

    def refresh(self) -> None:
        seen: dict[Path, PartIds] = {}
        damaged: dict[Path, Damaged] = {}
        for kind in (SHARDS, REJECTS):
            for path in committed_parts(self.run_dir / kind):
                part = self._read(path, kind)
                if isinstance(part, Damaged):
                    damaged[path] = part
                elif part is not None:
                    seen[path] = part
        self.parts, self.damaged = seen, damaged

    def _read(self, path: Path, kind: str) -> PartIds | Damaged | None:
        stamp = _stamp(path)
        if stamp is None:  # deleted by a concurrent rewrite
            return None
        cached = self.parts.get(path)
        if cached is not None and cached.stamp == stamp:
            return cached
        try:
            part = open_part(path, kind == REJECTS)
            if not isinstance(part, DataFile):
                return part
            hashes, retryable = _read_hashes(path, kind)
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as exc:  # a footer that reads but pages that do not
            return Damaged(path, f"unreadable id column ({exc})", foreign=False)
        return PartIds(path, kind, hashes, stamp, retryable)

    def retryable(self) -> np.ndarray:
        """Hashes of reject rows that a later run generates again (see RETRYABLE_REASONS)."""
        arrays = [p.retryable for p in self.parts.values() if len(p.retryable)]
        return np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint64)

    def hashes(self, kind: str) -> np.ndarray:
        arrays = [p.hashes for p in self.parts.values() if p.kind == kind]
        return np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint64)

    def done(self, kind: str) -> DoneSet:
        arrays = [p.hashes for p in self.parts.values() if p.kind == kind]
        return DoneSet(np.concatenate(arrays), owned=True) if arrays else DoneSet()

    def duplicated(self) -> np.ndarray:
        """Hashes that occur more than once across all committed parts (normally none)."""
        arrays = [p.hashes for p in self.parts.values()]
        if not arrays:
            return np.empty(0, dtype=np.uint64)
        everything = np.concatenate(arrays)
        everything.sort()  # in place: the concatenation is ours
        return sorted_unique(everything[1:][everything[1:] == everything[:-1]])

    def files_with(self, hashes: np.ndarray, kind: str | None = None) -> list[Path]:
        return [
            p.path for p in self.parts.values() if (kind is None or p.kind == kind) and np.isin(p.hashes, hashes).any()
        ]
