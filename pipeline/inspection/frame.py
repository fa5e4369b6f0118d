"""The per-row frame everything inspect reports is computed from, and the builder the scan threads fill.

The builder allocates every column once, for as many rows as the files hold, with one region per file; each
scanning thread writes its file's region (regions are disjoint, so no lock), and `build` closes the gaps the
filters left. Nothing is concatenated, so the frame never exists twice, and pages of a region no row reached
are never touched (np.empty of a large array is mapped lazily).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..store.files import DataFile

TOKENS = ("prompt_tokens", "completion_tokens", "reasoning_tokens")
COLUMNS: dict[str, type] = {
    "file_idx": np.int32,
    "row": np.int32,
    "rejected": np.bool_,
    "reason": np.int16,
    "endpoint": np.int16,
    "finish": np.int16,
    "created_at": np.float64,  # seconds since the epoch; float32 would round to minutes
    "answer_bytes": np.int32,
    "reasoning_bytes": np.float32,  # NaN where the reasoning was not read
    "answer_hash": np.int64,
    "checked": np.bool_,
    "looping": np.bool_,
    **dict.fromkeys(TOKENS, np.float32),  # NaN when unknown; exact for counts below 2**24
}


@dataclass
class Frame:
    """Per-row facts, aligned arrays; categorical columns are codes into the lists beside them.

    `checked` marks the rows the looping check ran on (`looping` is False elsewhere); `reasoning_bytes` is NaN
    where the reasoning was not read; `answer_hash` is an exact key of the stripped answer for the rows whose
    answer may be shared (see scan.py), 0 for all others.
    """

    files: list[DataFile]
    file_idx: np.ndarray
    row: np.ndarray
    rejected: np.ndarray
    reason: np.ndarray
    endpoint: np.ndarray
    finish: np.ndarray
    created_at: np.ndarray
    answer_bytes: np.ndarray
    reasoning_bytes: np.ndarray
    answer_hash: np.ndarray
    checked: np.ndarray
    looping: np.ndarray
    tokens: dict[str, np.ndarray]
    reasons: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    finishes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.file_idx.size)


class FrameBuilder:
    """Columns for up to `row_counts[i]` rows of file i; `put` appends a batch's facts to its file's region."""

    def __init__(self, row_counts: Sequence[int]) -> None:
        self._starts = np.concatenate([[0], np.cumsum(row_counts, dtype=np.int64)]).astype(np.int64)
        self._kept = [0] * len(row_counts)
        rows = int(self._starts[-1])
        self._columns: dict[str, np.ndarray] = {name: np.empty(rows, dtype) for name, dtype in COLUMNS.items()}

    def put(self, fi: int, facts: dict[str, np.ndarray]) -> None:
        n = len(facts["row"])
        at = int(self._starts[fi]) + self._kept[fi]
        for name, column in self._columns.items():
            column[at : at + n] = facts[name]
        self._kept[fi] += n

    def add_text_facts(self, fi: int, rows: np.ndarray, looping: np.ndarray, reasoning_bytes: np.ndarray) -> None:
        """Merge the reasoning checks of file `fi`'s `rows` (ascending) into the rows of it already put."""
        start = int(self._starts[fi])
        have = self._columns["row"][start : start + self._kept[fi]]  # ascending: batches come in file order
        pos = np.searchsorted(have, rows).clip(max=max(0, have.size - 1))
        present = (pos < have.size) & (have[pos] == rows) if have.size else np.zeros(rows.size, dtype=bool)
        at = start + pos[present]
        self._columns["looping"][at] |= looping[present]
        self._columns["reasoning_bytes"][at] = reasoning_bytes[present]

    def build(self, files: list[DataFile], reasons: list[str], endpoints: list[str], finishes: list[str]) -> Frame:
        end = 0
        for fi, n in enumerate(self._kept):  # moving left only, file by file: a region never overwrites the next
            start = int(self._starts[fi])
            if n and start != end:
                for column in self._columns.values():
                    column[end : end + n] = column[start : start + n]
            end += n
        c = {name: column[:end] for name, column in self._columns.items()}
        return Frame(
            files=files,
            file_idx=c["file_idx"],
            row=c["row"],
            rejected=c["rejected"],
            reason=c["reason"],
            endpoint=c["endpoint"],
            finish=c["finish"],
            created_at=c["created_at"],
            answer_bytes=c["answer_bytes"],
            reasoning_bytes=c["reasoning_bytes"],
            answer_hash=c["answer_hash"],
            checked=c["checked"],
            looping=c["looping"],
            tokens={name: c[name] for name in TOKENS},
            reasons=reasons,
            endpoints=endpoints,
            finishes=finishes,
        )
