"""What the inspection tools read from a RUN_DIR, and nothing else: file listings, the manifest, journals, metrics.

Committed data is `shards/*.parquet` and `rejects/*.parquet`; hidden files and `*.tmp` are files being written
and are never read. Journals (`journal/worker-{i}.{seq}.jsonl`) hold rows not yet committed; their last line may
be torn, which is ignored. Metrics (`metrics/worker-{i}.jsonl`) are one JSON line per second from the runner.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from ..schema import BASE_FIELDS, REJECT_FIELDS
from ..store.files import visible_files
from ..store.layout import JOURNAL, METRICS
from ..store.manifest import Manifest

_BASE_NAMES = {f.name for f in BASE_FIELDS} | {f.name for f in REJECT_FIELDS}


def keep_fields(path: Path) -> list[str]:
    """The keep_fields columns of a committed file: every column that is not a schema base column."""
    return [name for name in pq.read_schema(path).names if name not in _BASE_NAMES]


def total_prompts(man: Manifest) -> int | None:
    total = (man.get("input") or {}).get("total")
    return int(total) if isinstance(total, int) else None


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Parsed lines of a JSONL file; an unparsable line (a torn tail) is skipped, never fatal."""
    with path.open("rb") as fh:
        for line in fh:
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


def journal_rows(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Journal entries {"kind", "row"} in file order (worker, then sequence number)."""
    for path in sorted(visible_files(run_dir / JOURNAL, ".jsonl"), key=_journal_key):
        for entry in _json_lines(path):
            if entry.get("kind") in ("accepted", "rejected") and isinstance(entry.get("row"), dict):
                yield entry


def _journal_key(path: Path) -> tuple[str, int]:
    stem, _, seq = path.stem.rpartition(".")
    return (stem, int(seq)) if seq.isdigit() else (path.stem, -1)


def metrics_files(run_dir: Path) -> list[Path]:
    return visible_files(run_dir / METRICS, ".jsonl")


def tail_lines(path: Path, max_bytes: int = 256 * 1024) -> list[dict[str, Any]]:
    """The parsed lines in the last `max_bytes` of a file (a day of 1 s metrics need not be read whole)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(max(0, size - max_bytes))
        blob = fh.read()
    lines = blob.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first line is probably cut
    out = []
    for line in lines:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def first_line(path: Path) -> dict[str, Any] | None:
    with path.open("rb") as fh:
        line = fh.readline()
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None
