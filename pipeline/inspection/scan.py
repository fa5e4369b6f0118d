"""One streaming, column-selective pass over committed files into a compact per-row frame.

Every row contributes its numeric columns and its answer, reduced at once to a few numbers (trimmed byte length,
a fingerprint); memory is ~53 bytes per row however long the completions are. The text-heavy check (degenerate
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

from ..store import row_groups
from ..store.files import DataFile
from . import textmeasures
from .frame import TOKENS, Frame, FrameBuilder
from .where import Where

BATCH_BYTES = 4 << 20  # decoded bytes per batch (bigger batches cost memory and gain nothing)
MIN_BATCH_ROWS, MAX_BATCH_ROWS = 256, 65536
SCAN_THREADS = min(4, os.cpu_count() or 1)
TEXT_SAMPLE_ROWS = 512  # rows per file whose reasoning is read for the looping check (a 5% rate is ~25 rows)
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
        result: np.ndarray = np.asarray(local, dtype=np.int16)[dict_arr.indices.to_numpy(zero_copy_only=False)]
        return result

    def _code(self, value: str) -> int:
        if value not in self.index:
            self.index[value] = len(self.values)
            self.values.append(value)
        return self.index[value]


def scan(
    files: Sequence[DataFile], filters: Filters, threads: int = SCAN_THREADS, text_sample_rows: int = TEXT_SAMPLE_ROWS
) -> Frame:
    """The frame of the rows of `files` that pass `filters`; text checks on up to `text_sample_rows` per file."""
    dense = filters.where is not None and "reasoning" in filters.where.columns  # every row's reasoning is read
    builder = FrameBuilder([f.rows for f in files], dense_reasoning=dense)
    codes = {"reason": _Codes(), "endpoint": _Codes(), "finish": _Codes()}
    with ThreadPoolExecutor(max(1, threads)) as pool:
        jobs = enumerate(files)
        list(pool.map(lambda job: _scan_file(job[1], job[0], filters, codes, builder, text_sample_rows), jobs))
    frame = builder.build(list(files), codes["reason"].values, codes["endpoint"].values, codes["finish"].values)
    _confirm_shared(frame)
    return frame


def sampled_groups(row_groups: Sequence[int], budget: int = TEXT_SAMPLE_ROWS) -> set[int]:
    """Row groups holding at least `budget` rows (all of them in a small file), evenly spread over the file:
    the first and the last always, so a shard that degrades as it is written is caught at its end."""
    n = len(row_groups)
    if sum(row_groups) <= budget:
        return set(range(n))
    for k in range(2, n + 1):
        picks = set(np.linspace(0, n - 1, k).round().astype(int).tolist())
        if sum(row_groups[i] for i in picks) >= budget:
            return picks
    return set(range(n))


def sample_ranges(row_groups: Sequence[int], budget: int = TEXT_SAMPLE_ROWS) -> list[tuple[int, int, int]]:
    """(group, first row, rows) the text checks read: the sampled groups, each cut to its share of the budget
    (a file written as one huge row group is checked on its first `budget` rows, not all of them)."""
    picks = sorted(sampled_groups(row_groups, budget))
    share = -(-budget // max(1, len(picks))) if sum(row_groups) > budget else max(row_groups, default=0)
    starts = np.concatenate([[0], np.cumsum(row_groups, dtype=np.int64)])
    return [(g, int(starts[g]), min(row_groups[g], share)) for g in picks]


def _scan_file(
    f: DataFile, fi: int, filters: Filters, codes: dict[str, _Codes], out: FrameBuilder, budget: int
) -> None:
    if filters.reason is not None and not f.rejects:
        return
    pfile = pq.ParquetFile(f.path)
    names = set(pfile.schema_arrow.names)
    columns = [c for c in _SCAN_COLUMNS if c in names] + (["reason"] if f.rejects else [])
    missing: list[str] = []
    if filters.where is not None:
        columns += sorted(c for c in filters.where.columns if c not in columns and c in names)
        missing = sorted(c for c in filters.where.columns if c not in names)
    ranges = sample_ranges(f.row_groups, budget)
    in_sample = np.zeros(f.rows, dtype=bool)
    for _, first, count in ranges:
        in_sample[first : first + count] = True
    for batch, rows in _batches(pfile, columns, missing, filters):
        facts = _facts(batch, f.rejects, codes, in_sample[rows])
        facts["row"] = rows
        out.put(fi, facts)
    if filters.reasoning and "reasoning" in names and "reasoning" not in columns:
        for rows, looping, lengths in _reasoning_sample(pfile, ranges):
            out.add_text_facts(fi, rows, looping, lengths)
    # mimalloc keeps a thread's freed pages cached for the thread; a file's batches are gone, so hand them back
    pa.default_memory_pool().release_unused()


def _batch_rows(meta: pq.FileMetaData, columns: Sequence[str]) -> int:
    """Rows per batch so that a batch of `columns` decodes to about BATCH_BYTES: few batches (each one is a
    round trip through the GIL for the decoding thread), and bounded memory however long the texts are."""
    wanted = set(columns)
    size = rows = 0
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        rows += group.num_rows
        size += sum(
            group.column(i).total_uncompressed_size
            for i in range(group.num_columns)
            if group.column(i).path_in_schema in wanted
        )
    per_row = size / rows if rows else 1.0
    return int(min(MAX_BATCH_ROWS, max(MIN_BATCH_ROWS, BATCH_BYTES / max(per_row, 1.0))))


def _batches(
    pfile: pq.ParquetFile, columns: list[str], missing: list[str], filters: Filters
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """(batch, row numbers in file) for the rows of the file that pass the filters."""
    start = 0
    size = _batch_rows(pfile.metadata, columns)
    for batch in row_groups.iter_batches(pfile, size, columns, use_threads=False):
        for name in missing:  # e.g. `reason` in a shard: null there, as in a table of both
            batch = batch.append_column(name, pa.nulls(batch.num_rows, pa.string()))
        rows = np.arange(start, start + batch.num_rows, dtype=np.int32)
        start += batch.num_rows
        mask = _mask(batch, filters)
        if mask is not None:
            batch, rows = batch.filter(mask), rows[mask.to_numpy(zero_copy_only=False)]
        if batch.num_rows:
            yield batch, rows


def _reasoning_sample(
    pfile: pq.ParquetFile, ranges: list[tuple[int, int, int]]
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(row numbers, looping, byte lengths) of the reasoning in the sampled ranges, whatever the filters."""
    size = _batch_rows(pfile.metadata, ["reasoning"])
    for group, first, count in ranges:
        done = 0
        for batch in pfile.iter_batches(batch_size=size, row_groups=[group], columns=["reasoning"], use_threads=False):
            text = _text(batch, "reasoning").slice(0, count - done)
            yield (
                np.arange(first + done, first + done + len(text), dtype=np.int32),
                textmeasures.looping(text),
                _lengths(text),
            )
            done += len(text)
            if done >= count:
                break


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


def _facts(
    batch: pa.RecordBatch, rejects: bool, codes: dict[str, _Codes], checked: np.ndarray
) -> dict[str, np.ndarray]:
    """The frame's columns for one batch; the text checks run on the `checked` rows only."""
    n = batch.num_rows
    answer = _text(batch, "answer")
    offsets, data = textmeasures.buffers(answer)
    start, end = textmeasures.trimmed_bounds(offsets, data)
    answer_len = (end - start).astype(np.int32)
    fingerprint = np.zeros(n, dtype=np.uint32)  # 0: too short to compare
    long_enough = np.flatnonzero(answer_len >= SHARED_MIN_BYTES)
    wide = textmeasures.fingerprints(data, start[long_enough], end[long_enough]).view(np.uint64)
    folded = ((wide ^ (wide >> np.uint64(32))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    fingerprint[long_enough] = np.maximum(folded, 1)  # never 0: a long answer is always compared
    reasoning = _text(batch, "reasoning") if "reasoning" in batch.schema.names else None  # read for --where
    looping = np.zeros(n, dtype=bool)
    picked = np.flatnonzero(checked)
    if picked.size:
        for text in (answer, reasoning):
            if text is not None:
                looping[picked] |= textmeasures.looping(text.take(pa.array(picked)))
    facts = {
        "rejected": np.full(n, rejects),
        "reason": codes["reason"].encode(batch.column("reason"), "unknown") if rejects else np.full(n, -1, np.int16),
        "endpoint": codes["endpoint"].encode(_text(batch, "endpoint"), ""),
        "finish": codes["finish"].encode(_text(batch, "finish_reason"), "(none)"),
        "created_at": _seconds(batch),
        "answer_bytes": answer_len,
        "reasoning_bytes": _lengths(reasoning) if reasoning is not None else np.full(n, np.nan),
        "fingerprint": fingerprint,
        "checked": checked,
        "looping": looping,
    }
    for name in TOKENS:
        col = batch.column(name) if name in batch.schema.names else pa.nulls(n, pa.int32())
        facts[name] = col.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return facts


def _lengths(text: pa.Array) -> np.ndarray:
    result: np.ndarray = pc.binary_length(text.cast(pa.binary())).to_numpy(zero_copy_only=False).astype(np.float64)
    return result


def _text(batch: pa.RecordBatch, name: str) -> pa.Array:
    if name not in batch.schema.names:
        return pa.array([""] * batch.num_rows, pa.string())
    column = batch.column(name)
    return column.fill_null("") if column.null_count else column  # fill_null copies even when nothing is null


def _seconds(batch: pa.RecordBatch) -> np.ndarray:
    if "created_at" not in batch.schema.names:
        return np.full(batch.num_rows, np.nan)
    us = pc.cast(batch.column("created_at"), pa.timestamp("us", tz="UTC")).cast(pa.int64())
    result: np.ndarray = us.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False) / 1e6
    return result


def created_at(frame: Frame, fi: int) -> np.ndarray:
    """Seconds since the epoch (NaN: none) of the frame's rows of file `fi`, in frame order, read again from the
    file: the frame keeps only their span, not 8 bytes a row."""
    rows = frame.row[frame.bounds[fi] : frame.bounds[fi + 1]]
    pfile = pq.ParquetFile(frame.files[fi].path)
    if not rows.size or "created_at" not in pfile.schema_arrow.names:
        return np.full(rows.size, np.nan)
    table = pfile.read(columns=["created_at"], use_threads=False).combine_chunks()
    seconds: np.ndarray = _seconds(table.to_batches()[0])[rows]
    return seconds


def _confirm_shared(frame: Frame) -> None:
    """Key exactly the answers of the accepted rows whose fingerprint SHARED_MIN_PROMPTS accepted rows share
    (`frame.answer_rows`, `frame.answer_keys`) and let the fingerprints go. Every answer given to that many
    accepted rows is among them (equal answers have equal fingerprints); a fingerprint shared by different
    answers only adds rows whose exact keys then differ."""
    fingerprint = frame.fingerprint
    assert fingerprint is not None, "confirmed once"
    eligible = ~frame.rejected & (fingerprint != 0)
    k = SHARED_MIN_PROMPTS - 1
    ordered = fingerprint[eligible]  # a copy, sorted in place (np.sort would copy it again)
    ordered.sort()
    common = np.unique(ordered[k:][ordered[k:] == ordered[:-k]])  # sorted: a value seen k+1 times spans i..i+k
    del ordered
    if common.size:
        for lo in range(0, fingerprint.size, 1 << 16):  # a slice at a time: searchsorted's answer is int64
            here = fingerprint[lo : lo + (1 << 16)]
            eligible[lo : lo + here.size] &= common[np.searchsorted(common, here).clip(max=common.size - 1)] == here
    else:
        eligible[:] = False
    frame.fingerprint = None
    candidates = np.flatnonzero(eligible)
    del eligible
    keys = np.zeros(candidates.size, dtype=np.int64)
    file_of = np.searchsorted(frame.bounds, candidates, side="right") - 1
    for fi in np.unique(file_of).tolist():
        mine = np.flatnonzero(file_of == fi)
        keys[mine] = _exact_keys(frame.files[fi], frame.row[candidates[mine]])
    frame.answer_rows, frame.answer_keys = candidates, keys


def _exact_keys(f: DataFile, rows: np.ndarray) -> np.ndarray:
    """exact_key of the answer at each row of `f`, reading only the row groups that hold them."""
    rows = rows.astype(np.int64)
    bounds = np.cumsum([0, *f.row_groups])
    group_of = np.searchsorted(bounds, rows, side="right") - 1
    out = np.zeros(rows.size, dtype=np.int64)
    pfile = pq.ParquetFile(f.path)
    for g in np.unique(group_of).tolist():
        here = np.flatnonzero(group_of == g)
        answers = pfile.read_row_group(g, columns=["answer"]).column(0).take(pa.array(rows[here] - bounds[g]))
        out[here] = [textmeasures.exact_key((a or "").encode()) for a in answers.to_pylist()]
    return out
