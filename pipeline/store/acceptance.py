"""The serving model's speculative acceptance as the committed rows hold it, and the figures regen reports of it.

SGLang's per-request `spec_accept_length` is completion_tokens / spec_verify_ct: tokens per verify step, the bonus
token included (1.0: no draft token was accepted). It is the baseline a new draft model must beat on this data. A row
stores it for each generated turn (`turns[].spec_accept_length`, `spec_verify_ct`) and for its own, last, turn (the
top-level columns); null where the server reported none. Each turn is one request, so every figure is over turns:
`summary` gives their count, how many reported one, the mean and p10/p50/p90, and `weighted`, the token-weighted
mean (sum of tokens / sum of verify steps, what SGLang's own `avg_spec_accept_length` counts).

Only numeric leaves are read (`turns.list.element.spec_accept_length`, ...): never a text column. Files written
before schema 3 have no acceptance (null throughout); files without `turns` (schema 1) count each row as one turn.
`regen status`, `regen inspect` and the dataset card read it through `file_turns`, `row_turns` and `summary`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

QUANTILES = (10, 50, 90)
LENGTH_EDGES = (256, 1024, 4096, 16384)  # completion tokens: the output length buckets of `length_bucket`
LENGTH_LABELS = ("<256", "256-1k", "1k-4k", "4k-16k", "16k+", "unknown")
_FIELDS = ("spec_accept_length", "spec_verify_ct", "completion_tokens", "endpoint")
_LEAF = "turns.list.element."


@dataclass(frozen=True)
class Turns:
    """One entry per generated turn: the row it belongs to (its index in the file, or in the rows given), its index
    in that row, the acceptance (NaN: none reported), the verify steps and completion tokens (NaN: unknown), and the
    endpoint that served it (a code into `endpoints`)."""

    row: np.ndarray
    turn: np.ndarray
    accept: np.ndarray
    verify: np.ndarray
    tokens: np.ndarray
    endpoint: np.ndarray
    endpoints: list[str]

    def __len__(self) -> int:
        return int(self.row.size)

    def take(self, mask: np.ndarray) -> Turns:
        return Turns(
            self.row[mask], self.turn[mask], self.accept[mask], self.verify[mask], self.tokens[mask],
            self.endpoint[mask], self.endpoints,
        )  # fmt: skip


EMPTY = Turns(
    np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0), np.empty(0), np.empty(0), np.empty(0, np.int32), []
)


def file_turns(path: Path, rows: np.ndarray | None = None) -> Turns:
    """The turns of the rows of one committed file (all of them, or those at `rows`, ascending)."""
    pfile = pq.ParquetFile(path)
    schema = pfile.schema_arrow
    nested = _turn_fields(schema)
    picks = None if rows is None else pa.array(rows, pa.int64())
    index = np.arange(pfile.metadata.num_rows, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    if not nested:  # schema 1: no `turns`; each row is its own one turn
        return _own(pfile, schema, picks, index)
    table = pfile.read(columns=[_LEAF + name for name in nested], use_threads=False)
    lists = (table if picks is None else table.take(picks)).column("turns").combine_chunks()
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(lists)
    values = _columns({name: flat.field(name) for name in nested}, len(flat))
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    position = (np.arange(len(flat), dtype=np.int64) - first[parents]).astype(np.int32)
    listed = _turns(index[parents], position, values)
    bare = np.flatnonzero(lengths == 0)  # a row with no turns listed (never in shards): its own columns instead
    if not bare.size:
        return listed
    return concat([listed, _own(pfile, schema, pa.array(index[bare]), index[bare])])


def _own(pfile: pq.ParquetFile, schema: pa.Schema, picks: pa.Array | None, index: np.ndarray) -> Turns:
    """The top-level columns of the rows at `picks` (all rows: None), each row as its one turn."""
    top = [name for name in _FIELDS if name in schema.names]
    table = pfile.read(columns=top, use_threads=False) if top else pa.table({"_": pa.nulls(pfile.metadata.num_rows)})
    table = table if picks is None else table.take(picks)
    own = _columns({name: table.column(name) for name in top}, table.num_rows)
    return _turns(index, np.zeros(table.num_rows, np.int32), own)


def _turn_fields(schema: pa.Schema) -> list[str]:
    """The fields of `_FIELDS` a file's `turns` struct has ([] without `turns`, or with none of them)."""
    if "turns" not in schema.names:
        return []
    kind = schema.field("turns").type
    if not pa.types.is_list(kind) or not pa.types.is_struct(kind.value_type):
        return []
    names = {kind.value_type.field(i).name for i in range(kind.value_type.num_fields)}
    return [name for name in _FIELDS if name in names]


def _columns(arrays: Mapping[str, Any], n: int) -> dict[str, Any]:
    """Numeric fields as float64 (NaN for null or missing), the endpoint as strings (a pyarrow array)."""
    out: dict[str, Any] = {}
    for name in _FIELDS[:3]:
        array = arrays.get(name)
        out[name] = np.full(n, np.nan) if array is None else _floats(array)
    out["endpoint"] = arrays.get("endpoint", pa.nulls(n, pa.string()))
    return out


def _floats(array: Any) -> np.ndarray:
    return np.asarray(pc.cast(array, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=float)


def _turns(row: np.ndarray, turn: np.ndarray, values: Mapping[str, Any]) -> Turns:
    endpoint = values["endpoint"]
    if isinstance(endpoint, pa.ChunkedArray):
        endpoint = endpoint.combine_chunks()
    encoded = pc.dictionary_encode(pc.fill_null(pc.cast(endpoint, pa.string()), ""))
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    return Turns(
        row, turn, values["spec_accept_length"], values["spec_verify_ct"], values["completion_tokens"],
        codes, encoded.dictionary.to_pylist(),
    )  # fmt: skip


def row_turns(rows: Sequence[Mapping[str, Any]]) -> Turns:
    """The turns of rows as plain dicts (journal rows): each row's `turns`, or the row itself when it lists none."""
    index: list[int] = []
    position: list[int] = []
    entries: list[Mapping[str, Any]] = []
    for i, row in enumerate(rows):
        listed = row.get("turns") or [row]
        for k, entry in enumerate(listed):
            index.append(i)
            position.append(k)
            entries.append(entry)
    values: dict[str, Any] = {
        name: np.array([_number(e.get(name)) for e in entries], dtype=float) for name in _FIELDS[:3]
    }
    values["endpoint"] = pa.array([e.get("endpoint") or "" for e in entries], pa.string())
    return _turns(np.array(index, dtype=np.int64), np.array(position, dtype=np.int32), values)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else np.nan


def concat(parts: Iterable[Turns]) -> Turns:
    """The turns of several files or row lists, endpoint codes merged (rows keep their own numbering)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return EMPTY
    names: dict[str, int] = {}
    codes = []
    for part in parts:
        remap = np.array([names.setdefault(name, len(names)) for name in part.endpoints], dtype=np.int32)
        codes.append(remap[part.endpoint] if part.endpoints else part.endpoint)
    return Turns(
        np.concatenate([p.row for p in parts]),
        np.concatenate([p.turn for p in parts]),
        np.concatenate([p.accept for p in parts]),
        np.concatenate([p.verify for p in parts]),
        np.concatenate([p.tokens for p in parts]),
        np.concatenate(codes),
        list(names),
    )


def summary(turns: Turns) -> dict[str, Any]:
    """{turns, reported, mean, p10, p50, p90, weighted} of the acceptance of `turns` (None figures: none reported)."""
    accept = turns.accept[~np.isnan(turns.accept)]
    out: dict[str, Any] = {"turns": len(turns), "reported": int(accept.size)}
    if not accept.size:
        return {**out, "mean": None, **{f"p{q}": None for q in QUANTILES}, "weighted": None}
    out["mean"] = float(accept.mean())
    out.update({f"p{q}": float(v) for q, v in zip(QUANTILES, np.percentile(accept, QUANTILES), strict=True)})
    both = ~np.isnan(turns.accept) & ~np.isnan(turns.verify)
    steps = float(turns.verify[both].sum())
    out["weighted"] = float((turns.accept[both] * turns.verify[both]).sum() / steps) if steps > 0 else None
    return out


def by_endpoint(turns: Turns) -> dict[str, dict[str, Any]]:
    """`summary` per endpoint that served a turn ("" for a turn with none recorded)."""
    return {name: summary(turns.take(turns.endpoint == code)) for code, name in sorted_names(turns.endpoints)}


def by_turn(turns: Turns) -> dict[str, dict[str, Any]]:
    """`summary` per turn index (0: a conversation's first generated turn, and every single-turn row's)."""
    return {str(k): summary(turns.take(turns.turn == k)) for k in np.unique(turns.turn).tolist()}


def by_length(turns: Turns) -> dict[str, dict[str, Any]]:
    """`summary` per output length bucket (`LENGTH_LABELS`, by the turn's completion tokens), empty buckets left out."""
    bucket = length_bucket(turns.tokens)
    return {LENGTH_LABELS[b]: summary(turns.take(bucket == b)) for b in np.unique(bucket).tolist()}


def length_bucket(tokens: np.ndarray) -> np.ndarray:
    """The index into LENGTH_LABELS of each completion length (the last label for an unknown one)."""
    bucket = np.searchsorted(np.asarray(LENGTH_EDGES, dtype=float), tokens, side="right")
    bucket[np.isnan(tokens)] = len(LENGTH_LABELS) - 1
    return bucket


def sorted_names(names: list[str]) -> list[tuple[int, str]]:
    return sorted(enumerate(names), key=lambda pair: pair[1])
