"""A compact set of id hashes: what resume skips.

A sorted uint64 array answers membership with a binary search at 8 bytes an id (1M ids: 8 MB, against ~100 MB for
a Python set of strings). Recent additions go to a small Python set that is merged into the array once it grows
past a fraction of it, so `add` stays O(1) amortised and the array is rebuilt only O(log n) times. `SeenHashes`
finds repeats in a stream of blocks without ever copying the whole set.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .partition import id_hashes

_MIN_MERGE = 4096


class DoneSet:
    def __init__(self, hashes: Iterable[int] | np.ndarray = (), *, owned: bool = False) -> None:
        """`owned`: the caller hands over a fresh uint64 array (a concatenation), which may be sorted in place."""
        array = hashes if isinstance(hashes, np.ndarray) else np.fromiter(hashes, dtype=np.uint64)
        self._sorted: np.ndarray = sorted_unique(array, owned=owned or not isinstance(hashes, np.ndarray))
        self._recent: set[int] = set()

    @classmethod
    def from_ids(cls, ids: Iterable[str]) -> DoneSet:
        return cls(id_hashes(ids))

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)

    def __contains__(self, h: object) -> bool:
        if not isinstance(h, int | np.integer):
            return False
        h = int(h)
        if h in self._recent:
            return True
        i = int(np.searchsorted(self._sorted, np.uint64(h)))
        return i < len(self._sorted) and int(self._sorted[i]) == h

    def contains_many(self, hashes: np.ndarray) -> np.ndarray:
        """A bool array: which of `hashes` are in the set."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        found = in_sorted(self._sorted, hashes)
        if self._recent:
            found |= np.isin(hashes, np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent)))
        return found

    def add(self, h: int) -> None:
        if h in self:
            return
        self._recent.add(int(h))
        if len(self._recent) >= max(_MIN_MERGE, len(self._sorted) // 16):
            self._merge()

    def update(self, hashes: np.ndarray) -> None:
        self._merge()
        self._sorted = sorted_unique(np.concatenate([self._sorted, np.asarray(hashes, dtype=np.uint64)]))

    def to_array(self) -> np.ndarray:
        """Every hash in the set, sorted and unique."""
        self._merge()
        return self._sorted

    def difference(self, other: DoneSet) -> DoneSet:
        mine = self.to_array()
        return DoneSet(mine[~in_sorted(other.to_array(), mine)])

    @property
    def nbytes(self) -> int:
        return int(self._sorted.nbytes) + 72 * len(self._recent)

    def _merge(self) -> None:
        if not self._recent:
            return
        new = sorted_unique(np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent)))
        self._sorted = np.insert(self._sorted, np.searchsorted(self._sorted, new), new)
        self._recent.clear()

    def __repr__(self) -> str:
        return f"DoneSet({len(self)} ids, {self.nbytes / 1e6:.1f} MB)"


class SeenHashes:
    """Hashes met so far, for finding repeats in a stream of blocks (the audit's duplicate ids): sorted runs of
    about RUN hashes, 8 bytes a hash and no copy of the whole set (a DoneSet grown by `add` briefly holds two copies
    of its array when it merges: ~17 MB more for the audit at 902K rows than at 90K). A block's hashes are looked up
    in every run at once; the newest run takes the block's new hashes and closes at RUN."""

    RUN = 1 << 16

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []  # sorted uint64 arrays of RUN hashes or fewer (or one block's, if larger)

    def repeats(self, hashes: np.ndarray) -> list[int]:
        """Add a block's hashes in order; returns the positions of those met before (in an earlier block or
        earlier in this one)."""
        met = np.zeros(len(hashes), dtype=bool)
        for run in self.runs:
            met |= in_sorted(run, hashes)
        new: dict[int, None] = {}
        again = []
        for k, (h, before) in enumerate(zip(hashes.tolist(), met.tolist(), strict=True)):
            if before or h in new:
                again.append(k)
            else:
                new[h] = None
        if new:
            self._add(np.fromiter(new, dtype=np.uint64, count=len(new)))
        return again

    def _add(self, fresh: np.ndarray) -> None:
        fresh.sort()
        if self.runs and len(self.runs[-1]) + len(fresh) <= self.RUN:
            last = self.runs.pop()
            fresh = np.insert(last, np.searchsorted(last, fresh), fresh)
        self.runs.append(fresh)


def sorted_unique(hashes: np.ndarray, *, owned: bool = False) -> np.ndarray:
    """np.unique, minus its hash-table path (numpy 2.x), which is ~8x slower than a sort for uint64.

    With `owned` (the array is the caller's to give away) it is sorted in place: no copy of a whole run's ids."""
    array = np.asarray(hashes, dtype=np.uint64)
    if owned and array.flags.writeable and array.flags.owndata:
        array.sort()
    else:
        array = np.sort(array)
    if len(array) < 2:
        return array
    keep = np.empty(len(array), dtype=bool)
    keep[0] = True
    np.not_equal(array[1:], array[:-1], out=keep[1:])
    return array if keep.all() else array[keep]  # no repeats (the usual case): no second 8 MB-per-million copy


def in_sorted(sorted_array: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """A bool array: which of `hashes` are in `sorted_array` (sorted uint64)."""
    if len(sorted_array) == 0:
        return np.zeros(len(hashes), dtype=bool)
    idx = np.searchsorted(sorted_array, hashes)
    idx[idx == len(sorted_array)] = 0
    result: np.ndarray = sorted_array[idx] == hashes
    return result
