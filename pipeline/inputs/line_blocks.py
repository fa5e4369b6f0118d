"""A JSONL file as blocks of whole lines, and an ordered map over those blocks in worker processes.

An uncompressed file is cut by byte offsets (`line_ranges`: a seek and a `readline` per block) and each worker
reads its own range; a gzipped one is read here and its blocks of bytes sent (`line_blocks`).

`regen audit` spends its time turning JSON into rows and judging them, one core's worth of Python per row; the work
of one line never depends on another, so blocks of lines (a few MB each) go to a pool of processes and their
results come back in file order. At most `2 * jobs` blocks are in flight, so memory is bounded by the block size,
not the file. With `jobs = 1` the same blocks are mapped in this process, so both paths give the same result.
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import IO, TypeVar, cast

from ..errors import InputError

T = TypeVar("T")
U = TypeVar("U")
BLOCK_BYTES = 4 << 20


def line_blocks(path: Path, size: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number of its first line, 1-based; bytes of whole lines) for the file, `size` bytes or so each."""
    try:
        with cast(IO[bytes], gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")) as fh:
            lineno, rest = 1, b""
            while block := fh.read(size):
                block = rest + block
                cut = block.rfind(b"\n") + 1
                if cut == 0:  # one line longer than a block: read on
                    rest = block
                    continue
                yield lineno, block[:cut]
                lineno += block.count(b"\n", 0, cut)
                rest = block[cut:]
            if rest:
                yield lineno, rest
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def line_ranges(path: Path, size: int = BLOCK_BYTES) -> Iterator[tuple[int, int]]:
    """(start, end) byte offsets of blocks of whole lines of an uncompressed file: the workers read their block
    themselves, so the file's bytes never pass through this process."""
    try:
        with path.open("rb") as fh:
            total = os.fstat(fh.fileno()).st_size
            start = 0
            while start < total:
                fh.seek(min(start + size, total) - 1)
                fh.readline()  # to the end of the line the block's last byte is in
                end = fh.tell()
                yield start, end
                start = end
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def read_range(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(end - start)


def ordered_map(work: Callable[[T], U], items: Iterable[T], jobs: int) -> Iterator[U]:
    """`work(item)` for each item, in order; in `jobs` worker processes when jobs > 1 (`work` must pickle)."""
    if jobs <= 1:
        yield from map(work, items)
        return
    # fork: the workers inherit the loaded modules, so a pool starts in milliseconds.
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        pending: deque[Future[U]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(work, item))
                if len(pending) >= 2 * jobs:  # bounded: read ahead no further than the workers can take
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
