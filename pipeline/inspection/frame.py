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
    answer may be shared (see scan.py), 0 for all others. Rows come file by file: file i's are
    `bounds[i]:bounds[i + 1]`. Of `created_at` only the span is kept (`created_span`: first and last, None when no
    row has one); the timeline reads the times again, a file at a time (scan.created_at).
    """

    files: list[DataFile]
    file_idx: np.ndarray
    row: np.ndarray
    rejected: np.ndarray
    reason: np.ndarray
    endpoint: np.ndarray
    finish: np.ndarray
    bounds: np.ndarray
    created_span: tuple[float, float] | None
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
        self._span = [(np.inf, -np.inf)] * len(row_counts)  # each file's (first, last) created_at
        rows = int(self._starts[-1])
        dtypes = {**COLUMNS, "file_idx": np.int16 if len(row_counts) < 2**15 else np.int32}
        self._columns: dict[str, np.ndarray] = {name: np.empty(rows, dtype) for name, dtype in dtypes.items()}

    def put(self, fi: int, facts: dict[str, np.ndarray]) -> None:
        n = len(facts["row"])
        at = int(self._starts[fi]) + self._kept[fi]
        for name, column in self._columns.items():
            column[at : at + n] = facts[name]
        self._kept[fi] += n
        times = facts["created_at"][~np.isnan(facts["created_at"])]
        if times.size:
            first, last = self._span[fi]
            self._span[fi] = (min(first, float(times.min())), max(last, float(times.max())))

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
        first, last = min((a for a, _ in self._span), default=np.inf), max((b for _, b in self._span), default=-np.inf)
        return Frame(
            files=files,
            file_idx=c["file_idx"],
            row=c["row"],
            rejected=c["rejected"],
            reason=c["reason"],
            endpoint=c["endpoint"],
            finish=c["finish"],
            bounds=np.concatenate([[0], np.cumsum(self._kept, dtype=np.int64)]),
            created_span=(first, last) if first <= last else None,
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
