"""One streaming, column-selective pass over committed files into a compact per-row frame.

Every row contributes its numeric columns and its answer, reduced at once to a few numbers (trimmed byte length,
a fingerprint); memory is ~70 bytes per row however long the completions are. The text-heavy check (degenerate
repetition, which needs the reasoning: most of a run's bytes) runs on a deterministic sample of row groups per
file, up to TEXT_SAMPLE_ROWS rows, spread over the file; the frame marks which rows were checked, so rates are
"looping rows of checked rows" and every shard is still judged on rows of its own. Answers whose fingerprint is
shared by SHARED_MIN_PROMPTS accepted rows are then read again and compared exactly (few rows in a healthy run).

Lengths are UTF-8 bytes (from Arrow offsets): characters for ASCII, more for others. Everything inspect reports
is computed from the frame afterwards (stats.py); rows are located again by (file, row) when a sample needs
their text. Files are scanned by a few threads (Arrow decoding releases the GIL).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import textfacts
from .frame import TOKENS, Frame, FrameBuilder
from .rundir import DataFile
from .where import Where

BATCH_ROWS = 4096
SCAN_THREADS = min(4, os.cpu_count() or 1)
TEXT_SAMPLE_ROWS = 1024  # rows per file whose reasoning is read for the looping check
SHARED_MIN_BYTES = 20  # answers shorter than this ("4", "Yes") are legitimately shared; not compared
SHARED_MIN_PROMPTS = 3  # an answer given to this many accepted prompts is "shared"

_SCAN_COLUMNS = ["answer", "finish_reason", "endpoint", "created_at", *TOKENS]


@dataclass
class Filters:
    reason: str | None = None
    endpoint: str | None = None
    where: Where | None = None
    reasoning: bool = True  # False: never read the reasoning text; the looping check then sees answers only


class _Codes:
    """Category strings to small ints, shared by the scanning threads."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.index: dict[str, int] = {}
        self._lock = threading.Lock()

    def encode(self, arr: pa.Array, null: str) -> np.ndarray:
        dict_arr = pc.dictionary_encode(arr.fill_null(null))
        with self._lock:
            local = [self._code(v) for v in dict_arr.dictionary.to_pylist()]
        return np.asarray(local, dtype=np.int16)[dict_arr.indices.to_numpy(zero_copy_only=False)]

    def _code(self, value: str) -> int:
        if value not in self.index:
            self.index[value] = len(self.values)
            self.values.append(value)
        return self.index[value]


def scan(files: Sequence[DataFile], filters: Filters, threads: int = SCAN_THREADS) -> Frame:
    builder = FrameBuilder([f.rows for f in files])
    codes = {"reason": _Codes(), "endpoint": _Codes(), "finish": _Codes()}
    with ThreadPoolExecutor(max(1, threads)) as pool:
        list(pool.map(lambda job: _scan_file(job[1], job[0], filters, codes, builder), enumerate(files)))
    frame = builder.build(list(files), codes["reason"].values, codes["endpoint"].values, codes["finish"].values)
    _confirm_shared(frame)
    return frame


def sampled_groups(row_groups: Sequence[int], budget: int = TEXT_SAMPLE_ROWS) -> set[int]:
    """Row groups holding at least `budget` rows (all of them in a small file), evenly spread over the file:
    the first and the last always, so a shard that degrades as it is written is caught at its end."""
    n = len(row_groups)
    if sum(row_groups) <= budget:
        return set(range(n))
    for k in range(1, n + 1):
        picks = set(np.linspace(0, n - 1, max(k, 2)).round().astype(int).tolist())
        if sum(row_groups[i] for i in picks) >= budget:
            return picks
    return set(range(n))


def _scan_file(f: DataFile, fi: int, filters: Filters, codes: dict[str, _Codes], out: FrameBuilder) -> None:
    if filters.reason is not None and not f.rejects:
        return
    pfile = pq.ParquetFile(f.path)
    names = set(pfile.schema_arrow.names)
    columns = [c for c in _SCAN_COLUMNS if c in names] + (["reason"] if f.rejects else [])
    missing: list[str] = []
    if filters.where is not None:
        columns += sorted(c for c in filters.where.columns if c not in columns and c in names)
        missing = sorted(c for c in filters.where.columns if c not in names)
    text = ["reasoning"] if filters.reasoning and "reasoning" in names and "reasoning" not in columns else []
    for groups, first_row, checked in _segments(f.row_groups, sampled_groups(f.row_groups)):
        read = columns + (text if checked else [])
        for batch, rows in _batches(pfile, groups, first_row, read, missing, filters):
            facts = _facts(batch, f.rejects, codes, checked)
            facts["file_idx"] = np.full(batch.num_rows, fi, dtype=np.int32)
            facts["row"] = rows
            out.put(fi, facts)
    # mimalloc keeps a thread's freed pages cached for the thread; a file's batches are gone, so hand them back
    pa.default_memory_pool().release_unused()


def _segments(row_groups: Sequence[int], sampled: set[int]) -> Iterator[tuple[list[int], int, bool]]:
    """Runs of consecutive row groups that are all sampled or all not: (groups, first row, sampled)."""
    start = 0
    run: list[int] = []
    first = 0
    for g, count in enumerate(row_groups):
        if run and (g in sampled) != (run[0] in sampled):
            yield run, first, run[0] in sampled
            run = []
        if not run:
            first = start
        run.append(g)
        start += count
    if run:
        yield run, first, run[0] in sampled


def _batches(
    pfile: pq.ParquetFile, groups: list[int], first_row: int, columns: list[str], missing: list[str], filters: Filters
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """(batch, row numbers in file) for the rows of `groups` that pass the filters."""
    start = first_row
    for batch in pfile.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, columns=columns, use_threads=False):
        for name in missing:  # e.g. `reason` in a shard: null there, as in a table of both
            batch = batch.append_column(name, pa.nulls(batch.num_rows, pa.string()))
        rows = np.arange(start, start + batch.num_rows, dtype=np.int32)
        start += batch.num_rows
        mask = _mask(batch, filters)
        if mask is not None:
            batch, rows = batch.filter(mask), rows[mask.to_numpy(zero_copy_only=False)]
        if batch.num_rows:
            yield batch, rows


def _mask(batch: pa.RecordBatch, filters: Filters) -> pa.Array | None:
    conds: list[pa.Array] = []
    if filters.reason is not None:
        conds.append(pc.equal(batch.column("reason"), filters.reason))
    if filters.endpoint is not None:
        conds.append(pc.equal(batch.column("endpoint"), filters.endpoint))
    if filters.where is not None:
        table = pa.Table.from_batches([batch])
        marked = table.append_column("__pos", pa.array(np.arange(batch.num_rows)))
        kept = marked.filter(filters.where.expression).column("__pos").to_numpy()
        keep = np.zeros(batch.num_rows, dtype=bool)
        keep[kept] = True
        conds.append(pa.array(keep))
    if not conds:
        return None
    result = conds[0]
    for other in conds[1:]:
        result = pc.and_(result, other)
    return result.fill_null(False)


def _facts(batch: pa.RecordBatch, rejects: bool, codes: dict[str, _Codes], checked: bool) -> dict[str, np.ndarray]:
    n = batch.num_rows
    answer = _text(batch, "answer")
    offsets, data = textfacts.buffers(answer)
    start, end = textfacts.trimmed_bounds(offsets, data)
    answer_len = (end - start).astype(np.int32)
    fingerprint = np.zeros(n, dtype=np.int64)
    long_enough = np.flatnonzero(answer_len >= SHARED_MIN_BYTES)
    fingerprint[long_enough] = textfacts.fingerprints(data, start[long_enough], end[long_enough])
    has_reasoning = "reasoning" in batch.schema.names
    reasoning = _text(batch, "reasoning") if has_reasoning else None
    looping = np.zeros(n, dtype=bool)
    if checked:
        looping = textfacts.looping(answer) | (textfacts.looping(reasoning) if reasoning is not None else looping)
    facts = {
        "rejected": np.full(n, rejects),
        "reason": codes["reason"].encode(batch.column("reason"), "unknown") if rejects else np.full(n, -1, np.int16),
        "endpoint": codes["endpoint"].encode(_text(batch, "endpoint"), ""),
        "finish": codes["finish"].encode(_text(batch, "finish_reason"), "(none)"),
        "created_at": _seconds(batch),
        "answer_bytes": answer_len,
        "reasoning_bytes": _lengths(reasoning) if reasoning is not None else np.full(n, np.nan),
        "answer_hash": fingerprint,
        "checked": np.full(n, checked),
        "looping": looping,
    }
    for name in TOKENS:
        col = batch.column(name) if name in batch.schema.names else pa.nulls(n, pa.int32())
        facts[name] = col.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return facts


def _lengths(text: pa.Array) -> np.ndarray:
    return pc.binary_length(text.cast(pa.binary())).to_numpy(zero_copy_only=False).astype(np.float64)


def _text(batch: pa.RecordBatch, name: str) -> pa.Array:
    if name not in batch.schema.names:
        return pa.array([""] * batch.num_rows, pa.string())
    column = batch.column(name)
    return column.fill_null("") if column.null_count else column  # fill_null copies even when nothing is null


def _seconds(batch: pa.RecordBatch) -> np.ndarray:
    if "created_at" not in batch.schema.names:
        return np.full(batch.num_rows, np.nan)
    us = pc.cast(batch.column("created_at"), pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return us.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False) / 1e6


def _confirm_shared(frame: Frame) -> None:
    """Replace the answer fingerprints by exact keys for the accepted rows whose fingerprint SHARED_MIN_PROMPTS
    accepted rows share, and by 0 for all other rows (in place: the frame is the biggest thing we hold)."""
    fingerprint = frame.answer_hash
    eligible = ~frame.rejected & (fingerprint != 0)
    k = SHARED_MIN_PROMPTS - 1
    ordered = np.sort(fingerprint[eligible])
    common = np.unique(ordered[k:][ordered[k:] == ordered[:-k]])  # sorted: a value seen k+1 times spans i..i+k
    del ordered
    if common.size:
        eligible &= common[np.searchsorted(common, fingerprint).clip(max=common.size - 1)] == fingerprint
    else:
        eligible[:] = False
    fingerprint[~eligible] = 0
    candidates = np.flatnonzero(eligible)
    for fi in np.unique(frame.file_idx[candidates]).tolist():
        mine = candidates[frame.file_idx[candidates] == fi]
        fingerprint[mine] = _exact_keys(frame.files[fi], frame.row[mine])


def _exact_keys(f: DataFile, rows: np.ndarray) -> np.ndarray:
    """exact_key of the answer at each row of `f`, reading only the row groups that hold them."""
    bounds = np.cumsum([0, *f.row_groups])
    group_of = np.searchsorted(bounds, rows, side="right") - 1
    out = np.zeros(rows.size, dtype=np.int64)
    pfile = pq.ParquetFile(f.path)
    for g in np.unique(group_of).tolist():
        here = np.flatnonzero(group_of == g)
        answers = pfile.read_row_group(g, columns=["answer"]).column(0).take(pa.array(rows[here] - bounds[g]))
        out[here] = [textfacts.exact_key((a or "").encode()) for a in answers.to_pylist()]
    return out
