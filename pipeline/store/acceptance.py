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

from collections.abc import Callable, Iterable, Mapping, Sequence
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
    known = ~np.isnan(turns.accept)
    return figures(len(turns), turns.accept[known], turns.verify[known])


def figures(turns: int, accept: np.ndarray, verify: np.ndarray) -> dict[str, Any]:
    """`summary` of `turns` turns whose reported acceptances are `accept` (in the turns' order) with their verify
    steps `verify` (NaN: unknown). Sums are numpy's pairwise ones, over float64 arrays in that order: the order of
    the turns is part of the result's last bits, so every caller keeps it."""
    out: dict[str, Any] = {"turns": turns, "reported": int(accept.size)}
    if not accept.size:
        return {**out, "mean": None, **{f"p{q}": None for q in QUANTILES}, "weighted": None}
    weighted = _weighted(accept, verify)
    accept = np.array(accept, dtype=np.float64)  # a copy: the percentiles reorder it in place
    out["mean"] = float(accept.mean())
    quantiles = np.percentile(accept, QUANTILES, overwrite_input=True)
    out.update({f"p{q}": float(v) for q, v in zip(QUANTILES, quantiles, strict=True)})
    out["weighted"] = weighted
    return out


def _weighted(accept: np.ndarray, verify: np.ndarray) -> float | None:
    """Sum of tokens over sum of verify steps, over the turns that report both."""
    both = ~np.isnan(verify)
    if not both.any():
        return None
    if not both.all():
        accept, verify = accept[both], verify[both]
    del both
    steps = sum64(lambda lo, hi: verify[lo:hi].astype(np.float64), verify.size)
    tokens = sum64(lambda lo, hi: accept[lo:hi].astype(np.float64) * verify[lo:hi], verify.size)
    return tokens / steps if steps > 0 else None


SUM_CHUNK = 1 << 16


def sum64(chunk: Callable[[int, int], np.ndarray], n: int) -> float:
    """`float(values.sum())` of the float64 array whose [lo:hi] is `chunk(lo, hi)`, to the bit, made a chunk at
    a time: numpy sums a contiguous float64 array pairwise, halving it at a multiple of 8 down to blocks of 128,
    and a chunk's own sum is that same recursion from the chunk down, so splitting where numpy splits gives its
    rounding exactly (a test compares it with numpy's on arrays of every size)."""
    if n <= SUM_CHUNK:
        return float(np.add.reduce(chunk(0, n), initial=0.0)) if n else 0.0
    half = n // 2
    half -= half % 8
    return sum64(chunk, half) + sum64(lambda lo, hi: chunk(half + lo, half + hi), n - half)


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


class Tally:
    """`summary` of turns added a part at a time, overall and per group of each kind named (e.g. "endpoint"),
    without keeping the turns: the count of turns per group, and of the reported turns, in the order added, their
    acceptance, verify steps and group codes. Values are stored as float32 where that is exact (the files store
    float32; a journal row's float may not be), a part's codes as one code when they are all one, else as the
    smallest integers that hold them. The figures are those `summary`
    gives of the concatenated turns, to the bit (the same values in the same order), at ~10 bytes a reported turn
    instead of ~40 a turn twice over."""

    def __init__(self, kinds: Sequence[str] = ()) -> None:
        self.turns = 0
        self._counts: dict[str, dict[Any, int]] = {kind: {} for kind in kinds}
        self._codes: dict[str, dict[Any, int]] = {kind: {} for kind in kinds}
        self._accept: list[np.ndarray] = []
        self._verify: list[np.ndarray] = []
        self._group: dict[str, list[np.ndarray | tuple[int, int]]] = {kind: [] for kind in kinds}

    def add(self, turns: Turns, groups: Mapping[str, tuple[np.ndarray, Sequence[Any]]]) -> None:
        """Add `turns`; `groups[kind]` is (codes, keys): turn i is in the group keys[codes[i]] of that kind."""
        self.turns += len(turns)
        known = ~np.isnan(turns.accept)
        self._accept.append(_compact(turns.accept[known]))
        self._verify.append(_compact(turns.verify[known]))
        for kind, counts in self._counts.items():
            codes, keys = groups[kind]
            mine = self._codes[kind]
            remap = np.array([mine.setdefault(key, len(mine)) for key in keys], dtype=np.int64)
            for code, n in enumerate(np.bincount(codes, minlength=len(keys)).tolist()):
                if n:
                    counts[keys[code]] = counts.get(keys[code], 0) + n
            kept = remap[codes[known]] if len(keys) else np.empty(0, np.int64)
            self._group[kind].append(_runs(kept, len(mine)))

    def summary(self) -> dict[str, Any]:
        """`summary` of every turn added."""
        accept, verify = self._joined()
        return figures(self.turns, accept, verify)

    def by(self, kind: str) -> dict[Any, dict[str, Any]]:
        """`summary` per group of `kind` that holds a turn, by key, keys in ascending order."""
        accept, verify = self._joined()
        kind_of = _code_type(len(self._codes[kind]))
        parts = [np.full(p[1], p[0], kind_of) if isinstance(p, tuple) else p for p in self._group[kind]]
        codes: np.ndarray = np.concatenate(parts, dtype=kind_of) if parts else np.empty(0, kind_of)
        out = {}
        for key in sorted(self._counts[kind]):
            mask = codes == self._codes[kind][key]
            whole = bool(mask.all())  # e.g. every turn a first turn: no copies of the arrays
            mine = (accept, verify) if whole else (accept[mask], verify[mask])
            del mask
            out[key] = figures(self._counts[kind][key], *mine)
            del mine
        return out

    def _joined(self) -> tuple[np.ndarray, np.ndarray]:
        """The reported turns' acceptance and verify steps, each one array from now on (the parts are let go)."""
        self._accept = [_joined(self._accept)]
        self._verify = [_joined(self._verify)]
        return self._accept[0], self._verify[0]


def _runs(codes: np.ndarray, groups: int) -> np.ndarray | tuple[int, int]:
    """A part's group codes: (code, count) when they are all one (a file is one shard, most turns are first
    turns), else the smallest integer array that holds them."""
    if codes.size and (codes == codes[0]).all():
        return int(codes[0]), int(codes.size)
    return codes.astype(_code_type(groups))


def _code_type(groups: int) -> type:
    return np.int8 if groups < 2**7 else np.int16 if groups < 2**15 else np.int32


def _compact(values: np.ndarray) -> np.ndarray:
    """float32 when it holds every value exactly (NaN included), else float64."""
    small = values.astype(np.float32)
    same = np.array_equal(small, values, equal_nan=True)
    return small if same else np.asarray(values, dtype=np.float64)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts end to end, in the widest of their types (the one part itself when there is one)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.empty(0, np.float32)
    return np.concatenate(parts, dtype=np.result_type(*parts))
