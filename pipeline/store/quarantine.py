"""`regen validate`: re-run the validators over committed shards, and optionally quarantine what fails.

Quarantine keeps every id in exactly one place, in two steps over the whole run:
  1. `stage_quarantine`: for each shard with failing rows, write `rejects/quarantine-<shard>-<digest>.parquet`
     (a committed file: hidden tmp file, fsync, rename, fsync the folder);
  2. rewrite each such shard without the rows that now sit in a `quarantine-*` rejects file (`rewrite_without`).
A crash between 1 and 2 leaves the moved rows in both places. A later `validate --quarantine` converges: ids
already in a `quarantine-*` rejects file are never written to rejects again, and are dropped from the shard,
even if they would pass now (the reject copy wins; shards lose). A crash inside 1 or 2 leaves only a hidden tmp
file, which readers ignore and the next rewriter deletes. Run it on a stopped run: it rewrites committed shards.

The store settles such ids the same way when a `regen run` resumes inside that window (an id in a shard and in a
`quarantine-*` rejects file leaves the shard, see recovery.py). Both steps hold the store's rewrite lock.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..config import ValidateConfig
from ..schema import COMPLETION_COLUMNS, completion_of, reject_schema
from ..validator import validate
from . import row_groups
from .files import (
    QUARANTINE_PREFIX as PREFIX,
)
from .files import (
    DataFile,
    damaged_parts,
    drop_ids,
    reject_files,
    remove_rewrite_tmp_files,
    rewrite_without,
    shard_files,
    write_committed,
)
from .layout import REJECTS, SHARDS
from .locks import rewrite_lock
from .manifest import manifest_or_empty, thinking_of, validate_config_of
from .remote import bucket_transaction
from .scan import duplicates

EXAMPLES = 10


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
    if not quarantine:
        result = _check_run(run_dir, cfg, thinking, stage=False)[0]
    else:
        with rewrite_lock(run_dir), bucket_transaction(run_dir, "quarantine"):
            result, drops = _check_run(run_dir, cfg, thinking, stage=True)
            for path, ids in drops.items():
                rewrite_without(path, drop_ids(ids))  # step 2
    result["damaged"] = [str(d) for d in damaged_parts(run_dir)]
    result["duplicates"] = duplicates(run_dir)
    return result


def stage_quarantine(
    run_dir: Path, cfg: ValidateConfig | None = None, *, thinking: bool | None = None
) -> dict[str, Any]:
    """Step 1 alone: write the failing rows to quarantine rejects, leave the shards as they are.

    This is the state a crash between the two steps leaves; `validate_run(quarantine=True)` and a resuming
    `regen run` both complete it. Returns what `validate_run` returns.
    """
    with rewrite_lock(Path(run_dir)):
        return _check_run(Path(run_dir), cfg, thinking, stage=True)[0]


def _check_run(
    run_dir: Path, cfg: ValidateConfig | None, thinking: bool | None, *, stage: bool
) -> tuple[dict[str, Any], dict[Path, list[str]]]:
    """Check every shard; when staging, write the failing rows to rejects. Returns the result and, per shard,
    the ids step 2 must drop from it (newly quarantined plus already quarantined)."""
    man = manifest_or_empty(run_dir)
    cfg = cfg if cfg is not None else validate_config_of(man)
    thinking = thinking if thinking is not None else thinking_of(man)
    if stage:
        remove_rewrite_tmp_files(run_dir / REJECTS)
        remove_rewrite_tmp_files(run_dir / SHARDS)
    moved = _quarantined_ids(run_dir)
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        "rows": 0,
        "failed": 0,
        "failed_by_reason": Counter(),
        "failed_by_shard": {},
        "examples": [],
        "quarantine": stage,
        "quarantined": 0,
        "repaired": 0,
        "thinking": thinking,
    }
    shards = shard_files(run_dir)
    drops: dict[Path, list[str]] = {}
    for f in shards:
        failing, leftover = _check_shard(f, cfg, thinking, moved, result)
        if stage and (failing or leftover.size):
            _write_quarantine(run_dir, f, failing)
            result["quarantined"] += len(failing)
            result["repaired"] += int(leftover.size)
            drops[f.path] = list(failing) + [str(x) for x in leftover]
    result["files"] = len(shards)
    result["failed_by_reason"] = dict(result["failed_by_reason"].most_common())
    return result, drops


def _quarantined_ids(run_dir: Path) -> pa.Array:
    chunks = [
        pq.read_table(f.path, columns=["id"]).column("id") for f in reject_files(run_dir) if f.name.startswith(PREFIX)
    ]
    return pa.chunked_array(chunks, pa.string()).combine_chunks() if chunks else pa.array([], pa.string())


def _check_shard(
    f: DataFile, cfg: ValidateConfig, thinking: bool, moved: pa.Array, result: dict[str, Any]
) -> tuple[dict[str, tuple[str, str]], np.ndarray]:
    """Failing ids of one shard not yet in rejects ({id: (reason, detail)}), and the rows already moved."""
    failing: dict[str, tuple[str, str]] = {}
    leftover: list[np.ndarray] = []
    names = pq.read_schema(f.path).names
    columns = ["id", *(c for c in COMPLETION_COLUMNS if c in names)]
    for batch in row_groups.iter_batches(pq.ParquetFile(f.path), 4096, columns):
        result["rows"] += batch.num_rows
        already = pc.is_in(batch.column("id"), value_set=moved).to_numpy(zero_copy_only=False)
        leftover.append(batch.column("id").filter(pa.array(already)).to_numpy(zero_copy_only=False))
        for i, row in enumerate(batch.to_pylist()):
            verdict = validate(completion_of(row), cfg, thinking)
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


def _write_quarantine(run_dir: Path, f: DataFile, failing: dict[str, tuple[str, str]]) -> None:
    """Step 1 for one shard: its failing rows as a committed quarantine rejects file."""
    if not failing:
        return
    pfile = pq.ParquetFile(f.path)
    schema = pfile.schema_arrow
    new_ids = pa.array(sorted(failing), pa.string())
    rows = pa.Table.from_batches(
        [b.filter(pc.is_in(b.column("id"), value_set=new_ids)) for b in row_groups.iter_batches(pfile, 4096)],
        schema=schema,
    )
    digest = hashlib.sha1("\n".join(new_ids.to_pylist()).encode()).hexdigest()[:12]
    target = run_dir / REJECTS / f"{PREFIX}{f.path.stem}-{digest}.parquet"
    write_committed(_as_rejects(rows, failing, schema), target)


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
