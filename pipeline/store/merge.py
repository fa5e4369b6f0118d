"""Merge many small committed parts into parts of about `target_rows` rows, keeping every id in exactly one row.

A long run with many restarts leaves many small parts; trainers and the Hub prefer fewer, larger files. A merge
is one transaction per folder (shards/, then rejects/ if asked), recorded before any output exists:

1. `RUN_DIR/merge.json` (written atomically) lists the input parts and the output names with their row counts.
2. Each output is streamed from the inputs, row group by row group, into a hidden temp file, fsynced and renamed
   into place under a new name (`merged-*.parquet`); the directory is fsynced.
3. The inputs are deleted, the directory fsynced, and merge.json removed.

A crash between 2 and 3 leaves ids in two committed files. `finish_interrupted_merge` repairs it from the plan:
if every output exists it finishes deleting the inputs (roll forward), otherwise it deletes the outputs that
exist (roll back; the inputs were never touched). The merge runs only when no run is live: it takes every worker
lock and the rewrite lock without blocking, and refuses while journals hold rows not yet committed. For a run in a
bucket the merge runs in the working copy and reaches the bucket as one commit-log record (`remote`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError, InputError, OutputError
from . import row_groups
from .durable import fsync_dir
from .files import (
    QUARANTINE_PREFIX,
    REWRITE_TMP_PREFIX,
    commit,
    parquet_options,
    readable_parts,
    remove_rewrite_tmp_files,
)
from .layout import JOURNAL, REJECTS, SHARDS
from .locks import whole_run
from .remote import bucket_transaction

PLAN = "merge.json"
ROW_GROUP_ROWS = 512


def merge_run(
    run_dir: Path, *, target_rows: int, rejects: bool = False, row_group_rows: int = ROW_GROUP_ROWS
) -> dict[str, Any]:
    """Combine the parts of shards/ (and rejects/ if asked) smaller than `target_rows` into parts of
    `target_rows` rows (the last one of each folder smaller). Parts already at least that big are left alone.

    Returns `{merged, before_files, after_files, rows, merged_inputs, outputs, recovered}`; counts cover the merged
    folders; `merged` is false when this call combined no parts (nothing would shrink).
    """
    if target_rows < 1:
        raise ConfigError(f"--target-rows must be at least 1, got {target_rows}")
    if not (run_dir / SHARDS).is_dir():
        raise InputError(f"{run_dir}: not a run directory (no shards/)")
    folders = [run_dir / SHARDS] + ([run_dir / REJECTS] if rejects else [])
    with exclusive(run_dir):
        recovered = finish_interrupted_merge(run_dir)
        before = [p for f in folders for p in readable_parts(f)]
        merged_inputs = outputs = 0
        for folder in folders:
            n_in, n_out = _merge_folder(run_dir, folder, target_rows, row_group_rows)
            merged_inputs, outputs = merged_inputs + n_in, outputs + n_out
        after = [p for f in folders for p in readable_parts(f)]
    return {
        "merged": merged_inputs > 0,
        "before_files": len(before),
        "after_files": len(after),
        "rows": sum(pq.ParquetFile(p).metadata.num_rows for p in after),
        "merged_inputs": merged_inputs,
        "outputs": outputs,
        "recovered": recovered,
    }


# ---------------------------------------------------------------- exclusion


@contextmanager
def exclusive(run_dir: Path) -> Iterator[None]:
    """Hold every worker lock and the rewrite lock, and check no journal holds uncommitted rows."""
    with whole_run(run_dir, "merge"), bucket_transaction(run_dir, "merge"):
        pending = _pending_journals(run_dir / JOURNAL)
        if pending:
            raise OutputError(
                f"{run_dir}: journals hold rows not yet committed ({', '.join(p.name for p in pending[:3])}); "
                "finish or resume the run first (rerun the same `regen run` command), then merge"
            )
        yield


def _pending_journals(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(Path(e.path) for e in os.scandir(folder) if e.is_file() and e.stat().st_size > 0)


# ---------------------------------------------------------------- one folder


def _merge_folder(run_dir: Path, folder: Path, target_rows: int, row_group_rows: int) -> tuple[int, int]:
    """Merge the small parts of one folder in one transaction; returns (inputs merged, outputs written)."""
    plan = stage_merge(run_dir, folder, target_rows, row_group_rows)
    if plan is None:
        return 0, 0
    _roll_forward(run_dir, plan)
    return len(plan["inputs"]), len(plan["outputs"])


def stage_merge(
    run_dir: Path, folder: Path, target_rows: int, row_group_rows: int = ROW_GROUP_ROWS
) -> dict[str, Any] | None:
    """Steps 1 and 2 of the module docstring for one folder: the plan, then every output committed beside its
    inputs. Returns the plan (None when nothing would shrink). Until step 3 the ids sit in two files, which is
    the state a crash here leaves and `finish_interrupted_merge` repairs. The caller holds `exclusive(run_dir)`.
    """
    groups = _plan_groups(folder, target_rows)
    if not groups:
        return None
    plan = {
        "dir": folder.name,
        "inputs": [p.name for g in groups for p in g["inputs"]],
        "input_rows": [n for g in groups for n in g["input_rows"]],
        "outputs": [{"name": n, "rows": r} for g in groups for n, r in g["outputs"]],
    }
    _write_plan(run_dir, plan)
    try:
        for group in groups:
            _write_outputs(folder, group, row_group_rows)
        fsync_dir(folder)
    except BaseException:
        _roll_back(run_dir, plan)  # undo now rather than leave duplicates for the next open
        raise
    return plan


def _plan_groups(folder: Path, target_rows: int) -> list[dict[str, Any]]:
    """Small parts grouped by schema, each group with its output names and sizes; groups that would not shrink
    the file count are left out."""
    groups: list[dict[str, Any]] = []
    for path in readable_parts(folder):
        if path.name.startswith(QUARANTINE_PREFIX):
            continue  # the name is how the store and validate know these rows were quarantined: keep it
        meta = pq.ParquetFile(path)
        if meta.metadata.num_rows >= target_rows:
            continue
        schema = meta.schema_arrow
        group = next((g for g in groups if g["schema"].equals(schema, check_metadata=False)), None)
        if group is None:
            group = {"schema": schema, "inputs": [], "input_rows": [], "rows": 0}
            groups.append(group)
        group["inputs"].append(path)
        group["input_rows"].append(meta.metadata.num_rows)
        group["rows"] += meta.metadata.num_rows
    kept: list[dict[str, Any]] = []
    token = uuid.uuid4().hex[:12]
    for group in groups:
        full, rest = divmod(group["rows"], target_rows)
        sizes = [target_rows] * full + ([rest] if rest else [])
        if len(sizes) < len(group["inputs"]):
            start = sum(len(g["outputs"]) for g in kept)  # names sort in row order within one merge
            group["outputs"] = [(f"merged-{token}-{start + i:05d}.parquet", n) for i, n in enumerate(sizes)]
            kept.append(group)
    return kept


def _write_outputs(folder: Path, group: dict[str, Any], row_group_rows: int) -> None:
    source = _RowSource(group["inputs"], group["schema"], row_group_rows)
    for name, rows in group["outputs"]:
        tmp = folder / f"{REWRITE_TMP_PREFIX}{name}.tmp"
        try:
            with pq.ParquetWriter(tmp, group["schema"], **parquet_options(group["schema"])) as writer:
                left = rows
                while left:
                    table = source.take(min(left, row_group_rows))
                    if len(table) == 0:
                        raise OutputError(f"{folder}: inputs changed during the merge; merge again")
                    writer.write_table(table, row_group_size=row_group_rows)
                    left -= len(table)
            commit(tmp, folder / name, sync_dir=False)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise OutputError(f"cannot merge into {folder / name}: {exc.strerror or exc}") from exc


class _RowSource:
    """The rows of several parts, in order, handed out in tables of the asked size; one batch in memory."""

    def __init__(self, paths: list[Path], schema: pa.Schema, batch_rows: int) -> None:
        self._schema = schema
        self._batches = (b for p in paths for b in row_groups.iter_batches(pq.ParquetFile(p), batch_rows))
        self._carry = schema.empty_table()

    def take(self, n: int) -> pa.Table:
        parts, have = [self._carry], len(self._carry)
        while have < n:
            batch = next(self._batches, None)
            if batch is None:
                break
            parts.append(pa.Table.from_batches([batch]).cast(self._schema))
            have += batch.num_rows
        table = pa.concat_tables(parts)
        self._carry = table.slice(n)
        return table.slice(0, n)


# ---------------------------------------------------------------- plan and recovery


def finish_interrupted_merge(run_dir: Path) -> dict[str, Any] | None:
    """Complete or undo a merge that a crash interrupted, from RUN_DIR/merge.json; None if there was none.

    Returns `{action: "completed" | "rolled_back", dir, inputs, outputs}`. Idempotent (a crash during recovery is
    recovered by the next call). The caller must exclude other rewriters: hold the rewrite lock
    (`RUN_DIR/locks/rewrite.lock`), as `merge_run` and the store's open do.
    """
    plan = _read_plan(run_dir)
    if plan is None:
        return None
    folder = run_dir / plan["dir"]
    remove_rewrite_tmp_files(folder)
    outputs = [folder / o["name"] for o in plan["outputs"]]
    if all(p.exists() for p in outputs):
        _roll_forward(run_dir, plan)
        action = "completed"
    else:
        _roll_back(run_dir, plan)
        action = "rolled_back"
    return {"action": action, "dir": plan["dir"], "inputs": len(plan["inputs"]), "outputs": len(outputs)}


def _roll_forward(run_dir: Path, plan: dict[str, Any]) -> None:
    """Every output exists: check its row count against the plan, then delete the inputs and the plan."""
    folder = run_dir / plan["dir"]
    for out in plan["outputs"]:
        rows = pq.ParquetFile(folder / out["name"]).metadata.num_rows
        if rows != out["rows"]:
            raise OutputError(f"{folder / out['name']}: holds {rows} rows, the merge plan says {out['rows']}")
    try:
        for name in plan["inputs"]:
            (folder / name).unlink(missing_ok=True)
        fsync_dir(folder)
    except OSError as exc:
        raise OutputError(f"cannot delete merged inputs in {folder}: {exc.strerror or exc}; merge again") from exc
    _remove_plan(run_dir)


def _roll_back(run_dir: Path, plan: dict[str, Any]) -> None:
    """Some output is missing: the inputs must be intact (checked against the plan); delete the outputs."""
    folder = run_dir / plan["dir"]
    planned = plan.get("input_rows") or [None] * len(plan["inputs"])
    for name, rows in zip(plan["inputs"], planned, strict=True):
        path = folder / name
        if not path.exists() or (rows is not None and pq.ParquetFile(path).metadata.num_rows != rows):
            raise OutputError(
                f"{run_dir / PLAN}: merge outputs and inputs are both incomplete ({name} is gone or changed); "
                "refusing to touch files. Check the run with `regen validate`"
            )
    try:
        for out in plan["outputs"]:
            (folder / out["name"]).unlink(missing_ok=True)
        fsync_dir(folder)
    except OSError as exc:
        raise OutputError(f"cannot remove partial merge outputs in {folder}: {exc.strerror or exc}") from exc
    _remove_plan(run_dir)


def _read_plan(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads((run_dir / PLAN).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OutputError(f"{run_dir / PLAN}: unreadable merge plan: {exc}") from None
    if not isinstance(data, dict) or not {"dir", "inputs", "outputs"} <= data.keys():
        raise OutputError(f"{run_dir / PLAN}: not a merge plan")
    return data


def _write_plan(run_dir: Path, plan: dict[str, Any]) -> None:
    tmp = run_dir / f".{PLAN}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(plan, option=orjson.OPT_INDENT_2))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, run_dir / PLAN)
        fsync_dir(run_dir)
    except OSError as exc:
        raise OutputError(f"cannot write the merge plan {run_dir / PLAN}: {exc.strerror or exc}") from exc


def _remove_plan(run_dir: Path) -> None:
    (run_dir / PLAN).unlink(missing_ok=True)
    fsync_dir(run_dir)
