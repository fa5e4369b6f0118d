"""Reproducible random rows, fetched by position: only the row groups that hold a chosen row are read.

The choice depends only on the seed and the ordered list of candidate positions (files in name order, rows in
file order), so the same seed over the same RUN_DIR gives the same rows, and a different seed other rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ..schema import COMPLETION_COLUMNS, REJECT_FIELDS
from ..store.files import DataFile
from .pending import file_label

# what `sample_entry` reads: the row's own turn (schema's COMPLETION_COLUMNS), its prompt, attempts, time and turns
_SAMPLE_COLUMNS = ["id", "messages", *COMPLETION_COLUMNS, "attempts", "created_at", "turns"]
_REJECT_COLUMNS = [f.name for f in REJECT_FIELDS]  # and why, when the row is a reject


def choose(candidates: int, n: int, seed: int) -> np.ndarray:
    """Indices into the candidates, distinct, in a seed-determined order."""
    if candidates <= 0 or n <= 0:
        return np.empty(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return rng.choice(candidates, size=min(n, candidates), replace=False)


def fetch_rows(
    files: Sequence[DataFile], locations: Sequence[tuple[int, int]], columns: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The rows at (file index, row in file), in the order asked, reading one row group per distinct group."""
    wanted_columns = list(columns) if columns is not None else [*_SAMPLE_COLUMNS, *_REJECT_COLUMNS]
    wanted: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for order, (fi, row) in enumerate(locations):
        group, offset = _locate(files[fi].row_groups, row)
        wanted.setdefault((fi, group), []).append((order, offset))
    out: list[dict[str, Any] | None] = [None] * len(locations)
    for (fi, group), items in sorted(wanted.items()):
        f = files[fi]
        pfile = pq.ParquetFile(f.path)
        names = set(pfile.schema_arrow.names)
        table = pfile.read_row_group(group, columns=[c for c in wanted_columns if c in names])
        for order, offset in items:
            row = table.slice(offset, 1).to_pylist()[0]
            row["file"] = _label(f)
            out[order] = row
    return [row for row in out if row is not None]


def _locate(row_groups: Sequence[int], row: int) -> tuple[int, int]:
    start = 0
    for group, count in enumerate(row_groups):
        if row < start + count:
            return group, row - start
        start += count
    raise IndexError(f"row {row} beyond {start} rows")


_label = file_label


def prompt_text(messages: list[dict[str, Any]] | None) -> str:
    """The last user turn (what the completion answers), or the last message of any role."""
    if not messages:
        return ""
    users = [m for m in messages if (m or {}).get("role") == "user"]
    last = (users or messages)[-1] or {}
    return str(last.get("content") or "")


def sample_entry(row: dict[str, Any]) -> dict[str, Any]:
    """A sampled row as inspect reports it: plain JSON-able values, prompt pulled out of messages."""
    created = row.get("created_at")
    entry = {
        "id": row.get("id"),
        "file": row.get("file"),
        "endpoint": row.get("endpoint"),
        "model": row.get("model"),
        "finish_reason": row.get("finish_reason"),
        "prompt_tokens": row.get("prompt_tokens"),
        "completion_tokens": row.get("completion_tokens"),
        "reasoning_tokens": row.get("reasoning_tokens"),
        "attempts": row.get("attempts"),
        "latency_s": row.get("latency_s"),
        "created_at": created.isoformat() if created is not None else None,
        "prompt": prompt_text(row.get("messages")),
        "reasoning": row.get("reasoning") or "",
        "answer": row.get("answer") or "",
    }
    conv = conversation_of(row)
    if sum(m["role"] == "user" for m in conv) > 1:  # multi-turn: the whole regenerated conversation is the sample
        entry["conversation"] = conv
    if "reason" in row:
        entry.update(reason=row.get("reason"), detail=row.get("detail"))
    return entry


def conversation_of(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's whole conversation: the messages sent for its last turn (earlier assistant turns as their
    answers) with each generated turn's reasoning from `turns` where every assistant turn was generated, then the
    last turn's reasoning and answer. `generated` marks the turns regen wrote."""
    messages = [m for m in row.get("messages") or [] if m]
    turns = [t for t in row.get("turns") or [] if t]
    earlier = [m for m in messages if m.get("role") == "assistant"]
    all_generated = len(turns) == len(earlier) + 1
    out: list[dict[str, Any]] = []
    k = 0
    for m in messages:
        item: dict[str, Any] = {"role": str(m.get("role")), "content": str(m.get("content") or "")}
        if item["role"] == "assistant":
            item["reasoning"] = (turns[k].get("reasoning") or "") if all_generated else None
            item["generated"] = all_generated
            k += 1
        out.append(item)
    if row.get("answer") is not None or row.get("reasoning"):
        last = {"role": "assistant", "content": row.get("answer") or "", "reasoning": row.get("reasoning") or ""}
        out.append({**last, "generated": True})
    return out
