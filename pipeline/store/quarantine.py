"""`regen validate`: re-run the validators over committed shards, and optionally quarantine what fails.

Quarantine keeps every id in exactly one place. For each shard with failing rows it
  1. writes `rejects/quarantine-<shard>-<digest>.parquet` (hidden tmp file, fsync, rename, fsync the folder), then
  2. rewrites the shard without the failing rows (hidden tmp file, fsync, rename over the shard, fsync).
A crash between 1 and 2 leaves the moved rows in both places. A later `validate --quarantine` converges: ids
already in a `quarantine-*` rejects file are never written to rejects again, and are dropped from the shard,
even if they would pass now (the reject copy wins; shards lose). A crash inside 1 or 2 leaves only a hidden tmp
file, which readers ignore and the next quarantine deletes. Run it on a stopped run: it rewrites committed shards.

The store settles such ids the same way when a `regen run` resumes inside that window (an id in a shard and in a
`quarantine-*` rejects file leaves the shard, see store/recovery.py). The quarantine holds the store's rewrite lock.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..config import ValidateConfig
from ..inspection import rundir
from ..inspection.rundir import DataFile
from ..records import Completion
from ..schema import reject_schema
from ..validator import validate
from .durable import fsync_dir
from .locks import FileLock, rewrite_lock_path

PREFIX = "quarantine-"
EXAMPLES = 10
_COMPLETION_FIELDS = (
    "reasoning",
    "answer",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "model",
    "endpoint",
    "latency_s",
    "seed",
    "spec_accept_length",
)


def validate_run(
    run_dir: Path,
    cfg: ValidateConfig | None = None,
    *,
    thinking: bool | None = None,
    quarantine: bool = False,
) -> dict[str, Any]:
    """Validate every committed shard row; with `quarantine`, move the failing rows into rejects/.

    `cfg` None means the run's own [validate] section from run.json (defaults when absent); `thinking` None means
    the run's generation.thinking (True when absent).
    """
    run_dir = Path(run_dir)
    man = rundir.manifest(run_dir)
    cfg = cfg if cfg is not None else rundir.manifest_validate_config(man)
    thinking = thinking if thinking is not None else rundir.manifest_thinking(man)
    if quarantine:
        _remove_stale_tmp(run_dir)
    moved = _quarantined_ids(run_dir)
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        "rows": 0,
        "failed": 0,
        "failed_by_reason": Counter(),
        "failed_by_shard": {},
        "examples": [],
        "quarantine": quarantine,
        "quarantined": 0,
        "repaired": 0,
        "thinking": thinking,
    }
    shards = rundir.shard_files(run_dir)
    with _rewrite_lock(run_dir, quarantine):
        for f in shards:
            failing, leftover = _check_shard(f, cfg, thinking, moved, result)
            if quarantine and (failing or leftover.size):
                result["quarantined"] += _move(run_dir, f, failing, leftover)
                result["repaired"] += int(leftover.size)
    result["files"] = len(shards)
    result["failed_by_reason"] = dict(result["failed_by_reason"].most_common())
    return result


def _rewrite_lock(run_dir: Path, take: bool) -> AbstractContextManager[object]:
    """The store's rewrite lock, so a quarantine never interleaves with the store's own duplicate settling."""
    if not take:
        return nullcontext()
    (run_dir / "locks").mkdir(exist_ok=True)
    return FileLock(rewrite_lock_path(run_dir))


def _quarantined_ids(run_dir: Path) -> pa.Array:
    chunks = [
        pq.read_table(f.path, columns=["id"]).column("id")
        for f in rundir.reject_files(run_dir)
        if f.name.startswith(PREFIX)
    ]
    return pa.chunked_array(chunks, pa.string()).combine_chunks() if chunks else pa.array([], pa.string())


def _check_shard(
    f: DataFile, cfg: ValidateConfig, thinking: bool, moved: pa.Array, result: dict[str, Any]
) -> tuple[dict[str, tuple[str, str]], np.ndarray]:
    """Failing ids of one shard not yet in rejects ({id: (reason, detail)}), and the rows already moved."""
    failing: dict[str, tuple[str, str]] = {}
    leftover: list[np.ndarray] = []
    names = pq.read_schema(f.path).names
    columns = ["id", *(c for c in _COMPLETION_FIELDS if c in names)]
    for batch in pq.ParquetFile(f.path).iter_batches(batch_size=4096, columns=columns):
        result["rows"] += batch.num_rows
        already = pc.is_in(batch.column("id"), value_set=moved).to_numpy(zero_copy_only=False)
        leftover.append(batch.column("id").filter(pa.array(already)).to_numpy(zero_copy_only=False))
        for i, row in enumerate(batch.to_pylist()):
            verdict = validate(_completion(row), cfg, thinking)
            if verdict.ok:
                continue
            reason = verdict.reason or "invalid"
            result["failed"] += 1
            result["failed_by_reason"][reason] += 1
            result["failed_by_shard"][f.name] = result["failed_by_shard"].get(f.name, 0) + 1
            if len(result["examples"]) < EXAMPLES:
                result["examples"].append({"id": row["id"], "reason": reason, "detail": verdict.detail})
            if not already[i]:
                failing[row["id"]] = (reason, verdict.detail)
    return failing, np.concatenate(leftover) if leftover else np.empty(0, dtype=object)


def _completion(row: dict[str, Any]) -> Completion:
    return Completion(
        reasoning=row.get("reasoning"),
        answer=row.get("answer") or "",
        finish_reason=row.get("finish_reason") or "",
        prompt_tokens=row.get("prompt_tokens"),
        completion_tokens=row.get("completion_tokens"),
        reasoning_tokens=row.get("reasoning_tokens"),
        model=row.get("model") or "",
        endpoint=row.get("endpoint") or "",
        latency_s=row.get("latency_s") or 0.0,
        seed=row.get("seed") or 0,
        spec_accept_length=row.get("spec_accept_length"),
    )


def _move(run_dir: Path, f: DataFile, failing: dict[str, tuple[str, str]], leftover: np.ndarray) -> int:
    """Step 1 then step 2 of the module docstring for one shard; returns how many rows went to rejects."""
    pfile = pq.ParquetFile(f.path)
    schema = pfile.schema_arrow
    if failing:
        new_ids = pa.array(sorted(failing), pa.string())
        rows = pa.Table.from_batches(
            [b.filter(pc.is_in(b.column("id"), value_set=new_ids)) for b in pfile.iter_batches(batch_size=4096)],
            schema=schema,
        )
        digest = hashlib.sha1("\n".join(new_ids.to_pylist()).encode()).hexdigest()[:12]
        target = run_dir / "rejects" / f"{PREFIX}{f.path.stem}-{digest}.parquet"
        _write_atomic(_as_rejects(rows, failing, schema), target, pfile)
    drop = pa.array(list(failing) + [str(x) for x in leftover], pa.string())
    _rewrite_without(f.path, pfile, drop)
    return len(failing)


def _as_rejects(rows: pa.Table, failing: dict[str, tuple[str, str]], shard: pa.Schema) -> pa.Table:
    base = {"reason", "detail"}
    keep = [n for n in shard.names if n not in set(reject_schema().names) - base]
    target = reject_schema(keep)
    ids = rows.column("id").to_pylist()
    extra = {
        "reason": pa.array([failing[i][0] for i in ids], pa.string()),
        "detail": pa.array([f"quarantined by validate: {failing[i][1]}" for i in ids], pa.string()),
    }
    columns = [extra[n] if n in extra else rows.column(n).cast(target.field(n).type) for n in target.names]
    return pa.Table.from_arrays(columns, schema=target)


def _write_atomic(table: pa.Table, target: Path, like: pq.ParquetFile) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with pq.ParquetWriter(tmp, table.schema, compression=_compression(like)) as writer:
        writer.write_table(table, row_group_size=_group_rows(like))
    _commit(tmp, target)


def _rewrite_without(path: Path, pfile: pq.ParquetFile, drop: pa.Array) -> None:
    """Stream the shard into a hidden file minus the `drop` ids, then rename it over the shard."""
    tmp = path.with_name(f".{PREFIX}{path.name}.tmp")
    with pq.ParquetWriter(tmp, pfile.schema_arrow, compression=_compression(pfile)) as writer:
        for group in range(pfile.num_row_groups):
            table = pfile.read_row_group(group)
            kept = table.filter(pc.invert(pc.is_in(table.column("id"), value_set=drop)))
            if kept.num_rows:
                writer.write_table(kept)
    _commit(tmp, path)


def _commit(tmp: Path, target: Path) -> None:
    with tmp.open("rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    fsync_dir(target.parent)


def _compression(pfile: pq.ParquetFile) -> str:
    meta = pfile.metadata
    if meta.num_row_groups and meta.num_columns:
        return str(meta.row_group(0).column(0).compression).lower()
    return "zstd"


def _group_rows(pfile: pq.ParquetFile) -> int:
    meta = pfile.metadata
    return max(1, meta.row_group(0).num_rows) if meta.num_row_groups else 1024


def _remove_stale_tmp(run_dir: Path) -> None:
    """Hidden files left by an interrupted quarantine (only ours: their names carry the quarantine prefix)."""
    for folder in (run_dir / "rejects", run_dir / "shards"):
        if folder.is_dir():
            for p in folder.iterdir():
                if p.name.startswith(".") and p.name.endswith(".tmp") and PREFIX in p.name:
                    p.unlink()
