"""One streaming, column-selective pass over committed files into a compact per-row frame.

Text is read batch by batch and reduced at once to a few numbers per row (lengths, an answer hash, a looping
flag), so memory is ~60 bytes per row however long the completions are. Text is handled as UTF-8 bytes (lengths
come from Arrow offsets, tails are byte slices), so lengths are bytes: characters for ASCII, more for others.
Everything inspect reports is computed from the frame afterwards (stats.py); rows are located again by
(file, row) when a sample needs their text. Files are scanned by a few threads (Arrow decoding releases the GIL).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .rundir import DataFile
from .where import Where

BATCH_ROWS = 8192
SCAN_THREADS = min(4, os.cpu_count() or 1)
TAIL_CHARS = 1200  # how much of a text's end the looping check looks at
PROBE_CHARS = 40  # the closing phrase that must recur to call a text a loop
LOOP_REPEATS = 4  # ... this many times within the tail
SHARED_MIN_BYTES = 20  # answers shorter than this ("4", "Yes") are legitimately shared; not hashed

_NUMERIC = ("prompt_tokens", "completion_tokens", "reasoning_tokens")
_SCAN_COLUMNS = ["answer", "reasoning", "finish_reason", "endpoint", "created_at", *_NUMERIC]


@dataclass
class Filters:
    reason: str | None = None
    endpoint: str | None = None
    where: Where | None = None
    reasoning: bool = True  # False: skip the reasoning text (the bulk of the bytes); no reasoning loop check


@dataclass
class Frame:
    """Per-row facts, aligned arrays; categorical columns are codes into the lists beside them."""

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
    looping: np.ndarray
    tokens: dict[str, np.ndarray]
    reasons: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    finishes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.file_idx.size)


class _Codes:
    """Category strings to small ints, shared by the scanning threads."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.index: dict[str, int] = {}
        self._lock = threading.Lock()

    def encode(self, arr: pa.Array, null: str) -> np.ndarray:
        out = np.empty(len(arr), dtype=np.int16)
        dict_arr = pc.dictionary_encode(arr.fill_null(null))
        with self._lock:
            local = [self._code(v) for v in dict_arr.dictionary.to_pylist()]
        out[:] = np.asarray(local, dtype=np.int16)[dict_arr.indices.to_numpy(zero_copy_only=False)]
        return out

    def _code(self, value: str) -> int:
        if value not in self.index:
            self.index[value] = len(self.values)
            self.values.append(value)
        return self.index[value]


def scan(files: Sequence[DataFile], filters: Filters, threads: int = SCAN_THREADS) -> Frame:
    parts: dict[str, list[np.ndarray]] = {}
    codes = {"reason": _Codes(), "endpoint": _Codes(), "finish": _Codes()}
    with ThreadPoolExecutor(max(1, threads)) as pool:
        per_file = pool.map(lambda job: _scan_file(job[1], job[0], filters, codes), enumerate(files))
        for facts_list in per_file:  # in file order, whatever order the threads finish in
            for facts in facts_list:
                for key, value in facts.items():
                    parts.setdefault(key, []).append(value)
    cols = {key: np.concatenate(v) for key, v in parts.items()}
    if not cols:
        cols = _empty_columns()
    return Frame(
        files=list(files),
        file_idx=cols.pop("file_idx"),
        row=cols.pop("row"),
        rejected=cols.pop("rejected"),
        reason=cols.pop("reason"),
        endpoint=cols.pop("endpoint"),
        finish=cols.pop("finish"),
        created_at=cols.pop("created_at"),
        answer_bytes=cols.pop("answer_bytes"),
        reasoning_bytes=cols.pop("reasoning_bytes"),
        answer_hash=cols.pop("answer_hash"),
        looping=cols.pop("looping"),
        tokens={name: cols.pop(name) for name in _NUMERIC},
        reasons=codes["reason"].values,
        endpoints=codes["endpoint"].values,
        finishes=codes["finish"].values,
    )


def _scan_file(f: DataFile, fi: int, filters: Filters, codes: dict[str, _Codes]) -> list[dict[str, np.ndarray]]:
    out = []
    for batch, rows in _batches(f, filters):
        facts = _facts(batch, f.rejects, codes)
        facts["file_idx"] = np.full(batch.num_rows, fi, dtype=np.int32)
        facts["row"] = rows
        out.append(facts)
    return out


def _empty_columns() -> dict[str, np.ndarray]:
    ints = ("file_idx", "row", "reason", "endpoint", "finish", "answer_bytes", "reasoning_bytes", "answer_hash")
    cols: dict[str, np.ndarray] = {name: np.empty(0, dtype=np.int64) for name in ints}
    cols.update({name: np.empty(0) for name in ("created_at", *_NUMERIC)})
    cols.update(rejected=np.empty(0, dtype=bool), looping=np.empty(0, dtype=bool))
    return cols


def _batches(f: DataFile, filters: Filters) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """(batch, row numbers in file) for the rows of `f` that pass the filters."""
    if filters.reason is not None and not f.rejects:
        return
    pfile = pq.ParquetFile(f.path)
    names = set(pfile.schema_arrow.names)
    wanted = [c for c in _SCAN_COLUMNS if filters.reasoning or c != "reasoning"]
    columns = [c for c in wanted if c in names] + (["reason"] if f.rejects else [])
    missing: list[str] = []
    if filters.where is not None:
        columns += sorted(c for c in filters.where.columns if c not in columns and c in names)
        missing = sorted(c for c in filters.where.columns if c not in names)
    start = 0
    for batch in pfile.iter_batches(batch_size=BATCH_ROWS, columns=columns):
        for name in missing:  # e.g. `reason` in a shard: null there, as in a table of both
            batch = batch.append_column(name, pa.nulls(batch.num_rows, pa.string()))
        rows = np.arange(start, start + batch.num_rows, dtype=np.int64)
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


def _facts(batch: pa.RecordBatch, rejects: bool, codes: dict[str, _Codes]) -> dict[str, np.ndarray]:
    n = batch.num_rows
    answer = _text(batch, "answer").cast(pa.binary())  # bytes: lengths from offsets, no UTF-8 decoding
    reasoning = _text(batch, "reasoning").cast(pa.binary())
    answer_len = _stripped_lengths(answer)
    facts = {
        "rejected": np.full(n, rejects),
        "reason": codes["reason"].encode(batch.column("reason"), "unknown") if rejects else np.full(n, -1),
        "endpoint": codes["endpoint"].encode(_text(batch, "endpoint"), ""),
        "finish": codes["finish"].encode(_text(batch, "finish_reason"), "(none)"),
        "created_at": _seconds(batch),
        "answer_bytes": answer_len,
        "reasoning_bytes": pc.binary_length(reasoning).to_numpy(zero_copy_only=False).astype(np.int32),
        "answer_hash": _hashes(answer, answer_len),
        "looping": _looping(answer) | _looping(reasoning),
    }
    for name in _NUMERIC:
        col = batch.column(name) if name in batch.schema.names else pa.nulls(n, pa.int32())
        facts[name] = col.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return facts


def _stripped_lengths(answer: pa.Array) -> np.ndarray:
    """Byte lengths, with surrounding whitespace not counted (checked only where it can matter: short texts)."""
    lengths = pc.binary_length(answer).to_numpy(zero_copy_only=False).astype(np.int32)
    small = np.flatnonzero(lengths < 256)
    if small.size:
        texts = answer.take(pa.array(small)).to_pylist()
        lengths[small] = [len(t.strip()) for t in texts]
    return lengths


def _hashes(answer: pa.Array, lengths: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each answer long enough to count as a shared answer (0 for the others)."""
    out = np.zeros(len(answer), dtype=np.int64)
    rows = np.flatnonzero(lengths >= SHARED_MIN_BYTES)
    if rows.size:
        texts = answer.take(pa.array(rows)).to_pylist()
        out[rows] = np.fromiter((hash(t.strip()) for t in texts), dtype=np.int64, count=rows.size)
    return out


def _text(batch: pa.RecordBatch, name: str) -> pa.Array:
    if name not in batch.schema.names:
        return pa.array([""] * batch.num_rows, pa.string())
    return batch.column(name).fill_null("")


def _seconds(batch: pa.RecordBatch) -> np.ndarray:
    if "created_at" not in batch.schema.names:
        return np.full(batch.num_rows, np.nan)
    us = pc.cast(batch.column("created_at"), pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return us.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False) / 1e6


def _looping(text: pa.Array) -> np.ndarray:
    """Degenerate repetition: the text's closing phrase recurs LOOP_REPEATS times in its last TAIL_CHARS.

    A model stuck in a loop repeats a phrase until it stops or runs out of tokens, so its end is periodic and
    any 40-character piece of it recurs; in ordinary prose the closing 40 characters occur once. Works on bytes
    (`text` is binary): slicing the tail is O(1) per row and nothing is decoded.
    """
    out = np.zeros(len(text), dtype=bool)
    tails = pc.binary_slice(text, -TAIL_CHARS - 64).to_pylist()  # no take(): nearly every row is long enough
    for i, tail in enumerate(tails):
        if tail is not None and len(tail) >= PROBE_CHARS * LOOP_REPEATS:
            window = tail.rstrip()[-TAIL_CHARS:]
            out[i] = window.count(window[-PROBE_CHARS:]) >= LOOP_REPEATS
    return out


def looping_text(text: str) -> bool:
    """The looping check on one string (the same rule as the scan)."""
    return bool(_looping(pa.array([text.encode()], pa.binary()))[0])
