"""Measures of text columns computed on the raw UTF-8 bytes of an Arrow array, vectorised with numpy.

No per-row Python on the hot path: offsets and data come straight from the Arrow buffers, so trimming, lengths
and answer fingerprints cost a few array operations per batch however long the texts are. The looping check
(pipeline/loops.py, the detector the validator and the stream guard use) is the one per-row loop left, which is
why the scan runs it on a sample of row groups only.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from .. import loops

WINDOW = 8  # bytes per fingerprint window (one uint64)

_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True  # what bytes.strip() removes
_VECTOR_STEPS = 64  # whitespace runs longer than this (rare) are measured in Python
_EIGHT = np.arange(WINDOW, dtype=np.int64)
_MIX = np.array(
    [0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93, 0xA0761D6478BD642F],
    dtype=np.uint64,
)


def buffers(text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a null-free string or binary array: row i is data[offsets[i]:offsets[i + 1]]."""
    text = text.cast(pa.binary())  # int32 offsets; a string array's buffers are reused, not copied
    _, off_buf, data_buf = text.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int32, count=len(text) + 1, offset=text.offset * 4)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return offsets.astype(np.int64), data


def trimmed_bounds(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte bounds (start, end) of each row with surrounding ASCII whitespace removed, as bytes.strip() does."""
    start, end = offsets[:-1].copy(), offsets[1:].copy()
    _walk(start, end, data, forward=True)
    _walk(start, end, data, forward=False)
    return start, end


def _walk(start: np.ndarray, end: np.ndarray, data: np.ndarray, *, forward: bool) -> None:
    """Move `start` forward (or `end` back) over whitespace, one byte per step for the rows still on some."""
    rows = np.flatnonzero(start < end)
    for _ in range(_VECTOR_STEPS):
        if not rows.size:
            return
        at = start[rows] if forward else end[rows] - 1
        rows = rows[_WHITESPACE[data[at]]]
        if forward:
            start[rows] += 1
        else:
            end[rows] -= 1
        rows = rows[start[rows] < end[rows]]
    for i in rows.tolist():  # pathological runs of whitespace
        piece = data[start[i] : end[i]].tobytes()
        if forward:
            start[i] = end[i] - len(piece.lstrip())
        else:
            end[i] = start[i] + len(piece.rstrip())


def fingerprints(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A 64-bit fingerprint of each text data[start:end] (length at least WINDOW): its length mixed with four
    8-byte windows (head, thirds, tail). Equal texts have equal fingerprints; unequal ones rarely do, and callers
    confirm a match with `exact_key` before reporting it."""
    length = end - start
    h = length.astype(np.uint64) * _MIX[0]
    step = (length - WINDOW) // 3
    for k, pos in enumerate((start, start + step, start + 2 * step, end - WINDOW), 1):
        window = np.ascontiguousarray(data[pos[:, None] + _EIGHT]).view(np.uint64)[:, 0]
        h = (h ^ window) * _MIX[k]
        h ^= h >> np.uint64(31)
    result: np.ndarray = h.view(np.int64)
    return result


def exact_key(text: bytes) -> int:
    """A deterministic 64-bit key of the stripped text, never 0 (0 means "no key")."""
    key = int.from_bytes(hashlib.blake2b(text.strip(), digest_size=8).digest(), "little", signed=True)
    return key or 1


def looping(text: pa.Array) -> np.ndarray:
    """Degenerate repetition, by the one loop detector every judge of a text uses (pipeline/loops.py): the text
    falls into verbatim repetition somewhere (two copies of a unit and 600+ repeated characters at one of its 1 KB
    checkpoints). It reads whole texts, a few microseconds per KB, which is why the scan runs it on a sample of row
    groups only."""
    out = np.zeros(len(text), dtype=bool)
    for i, raw in enumerate(text.cast(pa.binary()).to_pylist()):
        if raw is not None and len(raw) > loops.MIN_REPEAT:
            out[i] = loops.find_loop(raw.decode("utf-8", "replace")) is not None
    return out


def looping_text(text: str) -> bool:
    """The looping check on one string (the same rule as the scan)."""
    return loops.find_loop(text) is not None
