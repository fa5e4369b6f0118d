"""What a run generated, looked up by id: the export of a repaired dataset (dataset/repair.py) asks it for each row
of the original.

`accepted_rows` reads the committed shards on demand (`AcceptedRows`: an index of ids, and the row groups the
original's rows ask for, so memory does not grow with the run's texts); `rejected_rows` holds each rejected id's
reason and fingerprint.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ..store.files import readable_parts
from ..store.layout import REJECTS, SHARDS
from ..store.partition import id_hash, id_hashes


@dataclass(frozen=True, slots=True)
class Generated:
    """What the run made of one row: (reasoning, answer) of every generated turn, and the fingerprint of the
    conversation it answered (None in runs made before regen recorded it)."""

    turns: list[tuple[str | None, str]]
    fingerprint: str | None


def accepted_rows(run_dir: Path) -> AcceptedRows:
    """id → what the run generated, from the committed shards (first copy of an id wins)."""
    return AcceptedRows([Path(p) for p in readable_parts(run_dir / SHARDS)])


class AcceptedRows(Mapping[str, Generated]):
    """What the run generated for each id, read on demand: the index holds where each id's row is (part, row group,
    row: one int) from the `id` column alone, and a row's turns are read with its whole row group, the most recent
    groups kept up to `CACHED_ROWS` rows (a merged part's groups may be large). The original is walked in its
    order, the order the reader sent the rows in, so the row groups it asks for come nearly in order (each worker's
    parts in turn) and are read about once. Memory: the ids, not the texts (issue 40: the seed's repair held every
    accepted turn, 7.6 GB at 902K rows).

    The index is two arrays, the ids' 64-bit hashes sorted and the place of each one's first row (16 bytes an id; a
    dict of the ids took ~150): a lookup checks the id of the row it lands on, so an id sharing its hash with a
    committed one is never taken for it; the ids whose hash more than one committed row has (copies before a resume
    settled them, or two ids sharing a hash) are placed exactly, from a dict built in a second pass over the ids."""

    CACHED_ROWS = 16384  # ~32 row groups of a run's parts (output.row_group_rows = 512)

    def __init__(self, parts: list[Path]):
        self._parts = parts
        hashes, places = [np.empty(0, np.uint64)], [np.empty(0, np.int64)]
        for ids, base in self._id_groups():
            hashes.append(id_hashes(ids))
            places.append(base + np.arange(len(ids), dtype=np.int64))
        every, where = np.concatenate(hashes), np.concatenate(places)
        order = np.argsort(every, kind="stable")  # equal hashes keep the parts' order: the first copy comes first
        self._hashes, first, counts = np.unique(every[order], return_index=True, return_counts=True)
        self._where = where[order][first]
        del every, where, order
        self._exact: dict[str, int] = {}  # the ids of a hash more than one row has: each one's first row
        shared = self._hashes[counts > 1]
        if shared.size:
            for ids, base in self._id_groups():
                for offset in np.flatnonzero(np.isin(id_hashes(ids), shared)).tolist():
                    self._exact.setdefault(ids[offset], base | offset)
        self._len = len(self._hashes) - len(shared) + len(self._exact)
        self._groups: OrderedDict[tuple[int, int], tuple[list[str], list[Generated]]] = OrderedDict()
        self._cached = 0  # rows in self._groups
        self.group_reads = 0  # row groups read for their turns (a walk in the run's order: each about once)
        self._last: tuple[object, int | None] = (None, None)  # the last id looked up and its place

    def _id_groups(self) -> Iterator[tuple[list[str], int]]:
        """Each row group's ids and the place of its first row, in the parts' order."""
        for pi, part in enumerate(self._parts):
            pf = pq.ParquetFile(part)
            for group in range(pf.num_row_groups):
                yield pf.read_row_group(group, columns=["id"]).column("id").to_pylist(), (pi << 40) | (group << 20)

    def _first(self, row_id: str) -> int | None:
        """The place of the first row whose id may be `row_id` (its own, or one sharing its hash), or None."""
        if row_id in self._exact:
            return self._exact[row_id]
        h = np.uint64(id_hash(row_id))
        i = int(np.searchsorted(self._hashes, h))
        return int(self._where[i]) if i < len(self._hashes) and self._hashes[i] == h else None

    def _place(self, row_id: object) -> int | None:
        """Where the first row of `row_id` is, or None when no committed row has it. The last answer is kept: a row
        of the original asks `in` and then `[]` for the same id, and the lookup hashes it and checks its row."""
        if self._last[0] == row_id:
            return self._last[1]
        at = self._first(row_id) if isinstance(row_id, str) else None
        if at is not None and row_id not in self._exact:
            ids, _ = self._group(at >> 40, (at >> 20) & 0xFFFFF)
            at = at if ids[at & 0xFFFFF] == row_id else None  # another id with this hash: not this one
        self._last = (row_id, at)
        return at

    def __getitem__(self, row_id: str) -> Generated:
        at = self._place(row_id)
        if at is None:
            raise KeyError(row_id)
        return self._group(at >> 40, (at >> 20) & 0xFFFFF)[1][at & 0xFFFFF]

    def __contains__(self, row_id: object) -> bool:
        return self._place(row_id) is not None

    def __iter__(self) -> Iterator[str]:
        """Each id once, at its first row, read again from the id columns (the index holds no id)."""
        for ids, base in self._id_groups():
            for offset, row_id in enumerate(ids):
                if self._first(row_id) == base | offset:
                    yield row_id

    def __len__(self) -> int:
        return self._len

    def _group(self, part: int, group: int) -> tuple[list[str], list[Generated]]:
        key = (part, group)
        if key in self._groups:
            self._groups.move_to_end(key)
            return self._groups[key]
        self.group_reads += 1
        pf = pq.ParquetFile(self._parts[part])
        names = ("id", "turns", "reasoning", "answer", "input_fingerprint")
        rows = pf.read_row_group(group, columns=[c for c in names if c in pf.schema_arrow.names]).to_pylist()
        generated = []
        for row in rows:
            entries = row.get("turns") or [{"reasoning": row.get("reasoning"), "answer": row.get("answer")}]
            turns = [(t.get("reasoning"), t.get("answer") or "") for t in entries]
            generated.append(Generated(turns, row.get("input_fingerprint")))
        self._groups[key] = ([row["id"] for row in rows], generated)
        self._cached += len(generated)
        while self._cached > self.CACHED_ROWS and len(self._groups) > 1:
            self._cached -= len(self._groups.popitem(last=False)[1][1])
        return self._groups[key]


def rejected_rows(run_dir: Path) -> dict[str, tuple[str, str | None]]:
    """id → (reason, input fingerprint or None) of every rejected row."""
    found: dict[str, tuple[str, str | None]] = {}
    for part in readable_parts(run_dir / REJECTS):
        names = pq.ParquetFile(part).schema_arrow.names
        table = pq.read_table(part, columns=[c for c in ("id", "reason", "input_fingerprint") if c in names])
        marks = table.column("input_fingerprint").to_pylist() if "input_fingerprint" in names else [None] * len(table)
        for row_id, reason, mark in zip(table.column("id").to_pylist(), table.column("reason").to_pylist(), marks,
                                        strict=True):  # fmt: skip
            found.setdefault(row_id, (reason or "", mark))
    return found
