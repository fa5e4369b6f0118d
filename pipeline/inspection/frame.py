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
    "row": np.int32,  # uint16 when every file has at most 65,536 rows
    "rejected": np.bool_,
    "reason": np.int16,
    "endpoint": np.int16,
    "finish": np.int16,
    "answer_bytes": np.int32,
    "reasoning_bytes": np.float32,  # only when every row's reasoning is read (--where on it): else sparse
    "fingerprint": np.uint32,
    "checked": np.bool_,
    "looping": np.bool_,
    **dict.fromkeys(TOKENS, np.float32),  # NaN when unknown; exact for counts below 2**24
}


@dataclass
class Frame:
    """Per-row facts, aligned arrays; categorical columns are codes into the lists beside them.

    `checked` marks the rows the looping check ran on (`looping` is False elsewhere). The reasoning's byte length
    is known for the rows at `reasoning_rows` (ascending; None: every row) as `reasoning_values` (NaN: not read);
    `reasoning_bytes(mask)` gives it per row. `fingerprint` is a 32-bit fingerprint of the stripped answer (0: too
    short to compare) until scan.py confirms the answers that may be shared: then `answer_rows` (ascending) holds
    the accepted rows whose answer may be shared and `answer_keys` their exact keys, and `fingerprint` is None.
    Rows come file by file: file i's are `bounds[i]:bounds[i + 1]` (`file_idx` spells it out per row). Of
    `created_at` only the span is kept (`created_span`: first and last, None when no row has one); the timeline
    reads the times again, a file at a time (scan.created_at).
    """

    files: list[DataFile]
    row: np.ndarray
    rejected: np.ndarray
    reason: np.ndarray
    endpoint: np.ndarray
    finish: np.ndarray
    bounds: np.ndarray
    created_span: tuple[float, float] | None
    answer_bytes: np.ndarray
    reasoning_rows: np.ndarray | None
    reasoning_values: np.ndarray
    fingerprint: np.ndarray | None
    checked: np.ndarray
    looping: np.ndarray
    tokens: dict[str, np.ndarray]
    reasons: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    finishes: list[str] = field(default_factory=list)
    answer_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    answer_keys: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __len__(self) -> int:
        return int(self.row.size)

    @property
    def file_idx(self) -> np.ndarray:
        """The file of each row (an array made on demand: the frame keeps only `bounds`)."""
        kind = np.int16 if len(self.files) < 2**15 else np.int32
        result: np.ndarray = np.repeat(np.arange(len(self.files), dtype=kind), np.diff(self.bounds))
        return result

    def file_of(self, pos: int) -> int:
        return int(np.searchsorted(self.bounds, pos, side="right")) - 1

    def reasoning_bytes(self, rows: np.ndarray) -> np.ndarray:
        """The reasoning's byte length (float32, NaN: not read) of the rows in the mask `rows`."""
        if self.reasoning_rows is None:
            dense: np.ndarray = self.reasoning_values[rows]
            return dense
        out = np.full(len(self), np.nan, dtype=np.float32)
        out[self.reasoning_rows] = self.reasoning_values
        result: np.ndarray = out[rows]
        return result


class FrameBuilder:
    """Columns for up to `row_counts[i]` rows of file i; `put` appends a batch's facts to its file's region."""

    def __init__(self, row_counts: Sequence[int], *, dense_reasoning: bool = False) -> None:
        """`dense_reasoning`: batches carry every row's reasoning length; else only `add_text_facts` gives some."""
        self._starts = np.concatenate([[0], np.cumsum(row_counts, dtype=np.int64)]).astype(np.int64)
        self._kept = [0] * len(row_counts)
        self._span = [(np.inf, -np.inf)] * len(row_counts)  # each file's (first, last) created_at
        self._reasoning: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in row_counts]
        rows = int(self._starts[-1])
        dtypes = {**COLUMNS, "row": np.uint16 if max(row_counts, default=0) <= 2**16 else np.int32}
        if not dense_reasoning:
            del dtypes["reasoning_bytes"]
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
        if "reasoning_bytes" in self._columns:
            self._columns["reasoning_bytes"][at] = reasoning_bytes[present]
        else:  # by place among the file's rows: `build` moves the file's rows, not their order
            self._reasoning[fi].append((pos[present], reasoning_bytes[present].astype(np.float32)))

    def build(self, files: list[DataFile], reasons: list[str], endpoints: list[str], finishes: list[str]) -> Frame:
        end = 0
        sparse: list[tuple[np.ndarray, np.ndarray]] = []
        for fi, n in enumerate(self._kept):  # moving left only, file by file: a region never overwrites the next
            sparse += [(end + pos, values) for pos, values in self._reasoning[fi]]
            start = int(self._starts[fi])
            if n and start != end:
                for column in self._columns.values():
                    column[end : end + n] = column[start : start + n]
            end += n
        c = {name: column[:end] for name, column in self._columns.items()}
        dense = "reasoning_bytes" in c
        values = [v for _, v in sparse]
        first, last = min((a for a, _ in self._span), default=np.inf), max((b for _, b in self._span), default=-np.inf)
        return Frame(
            files=files,
            row=c["row"],
            rejected=c["rejected"],
            reason=c["reason"],
            endpoint=c["endpoint"],
            finish=c["finish"],
            bounds=np.concatenate([[0], np.cumsum(self._kept, dtype=np.int64)]),
            created_span=(first, last) if first <= last else None,
            answer_bytes=c["answer_bytes"],
            reasoning_rows=None if dense else np.concatenate([np.empty(0, np.int64), *(p for p, _ in sparse)]),
            reasoning_values=c["reasoning_bytes"] if dense else np.concatenate([np.empty(0, np.float32), *values]),
            fingerprint=c["fingerprint"],
            checked=c["checked"],
            looping=c["looping"],
            tokens={name: c[name] for name in TOKENS},
            reasons=reasons,
            endpoints=endpoints,
            finishes=finishes,
        )
