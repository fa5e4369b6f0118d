"""The finished rows a run has not committed yet: accepted and rejected rows in the journals whose ids are in no
committed part. `regen inspect` reads them beside the shards (labelled `journal/...`), so quality is visible from
the first finished completion, not from the first committed shard (`output.shard_rows` rows, hours of a thinking
run); `regen status` counts them the same way.

For the scan they are written to two Parquet files in a temporary folder (never under RUN_DIR) with the run's own
schema, so every statistic, filter and sample treats them as it treats a committed part. A journal holds at most a
shard's worth of rows per worker, so this stays small.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..schema import reject_schema, shard_schema, to_table
from ..store import row_groups
from ..store.files import DataFile
from ..store.layout import REJECTS, SHARDS
from ..store.manifest import manifest_or_empty
from . import rundir

JOURNAL_LABEL = "journal"  # the label prefix of uncommitted rows in inspect's tables


def file_label(f: DataFile) -> str:
    """How inspect names a file: `shards/NAME`, `rejects/NAME`, or `journal/accepted (not yet in shards)`."""
    if f.name.startswith(JOURNAL_LABEL + "-"):
        return f"{JOURNAL_LABEL}/{'rejected' if f.rejects else 'accepted'} (not yet in shards)"
    return f"{REJECTS if f.rejects else SHARDS}/{f.name}"


def uncommitted(run_dir: Path, committed: Iterable[DataFile]) -> dict[str, dict[str, Any]]:
    """Journal entries ({kind, row}) by id, the last of an id winning, less the ids of the committed files."""
    entries: dict[str, dict[str, Any]] = {}
    for entry in rundir.journal_rows(run_dir):
        rid = entry["row"].get("id")
        if isinstance(rid, str):
            entries[rid] = entry
    if not entries:
        return entries
    pending = pa.array(list(entries), pa.string())
    for f in committed:
        for batch in row_groups.iter_batches(pq.ParquetFile(f.path), 65536, ["id"]):
            for rid in batch.column("id").filter(pc.is_in(batch.column("id"), value_set=pending)).to_pylist():
                entries.pop(rid, None)
    return entries


def journal_files(run_dir: Path, entries: dict[str, dict[str, Any]], folder: Path) -> list[DataFile]:
    """The uncommitted rows as Parquet files in `folder` (accepted, then rejected), with the run's schema."""
    keep = list(((manifest_or_empty(run_dir).get("config") or {}).get("input") or {}).get("keep_fields") or [])
    out = []
    for kind, schema, rejects in (("accepted", shard_schema(keep), False), ("rejected", reject_schema(keep), True)):
        rows = [e["row"] for e in entries.values() if e["kind"] == kind]
        if not rows:
            continue
        path = folder / f"{JOURNAL_LABEL}-{kind}.parquet"
        pq.write_table(to_table(rows, schema), path)
        out.append(DataFile(path, rejects, (len(rows),)))
    return out
