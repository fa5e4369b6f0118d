"""Quality statistics over a scanned frame: overall, per shard and per endpoint, with the outliers flagged.

A group (shard or endpoint) is flagged when one of its problem rates is both material and well above the rate
of all the other rows pooled (`rate >= FLAG_MIN_RATE and rate >= 2 * rest + FLAG_MARGIN`), or when its median
completion length is less than half or more than twice everyone else's. One bad shard of ten thus stands out
even when it barely moves the overall numbers. The looping rate of a group is over its rows the looping check
ran on (a sample per file, see scan.py), so it compares like with like.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .frame import Frame
from .scan import SHARED_MIN_PROMPTS

PERCENTILES = (1, 10, 50, 90, 99)
# An answer is suspiciously short under this many bytes: a fixed line (not one drawn from the run's own median,
# which moved between runs and fell to 1 byte when most answers were empty), so two reports compare.
SHORT_BYTES = 20
FLAG_MIN_RATE = 0.05
FLAG_MARGIN = 0.02
FLAG_MIN_ROWS = 10

PROBLEMS = ("reject_rate", "empty_answer_rate", "repetition_rate", "short_rate", "shared_rate", "truncated_rate")


class Derived:
    """Per-row booleans derived once from the frame (all aligned with it)."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        accepted = ~frame.rejected
        self.accepted = accepted
        self.short_threshold = SHORT_BYTES
        self.empty = frame.answer_bytes == 0
        self.short = (frame.answer_bytes > 0) & (frame.answer_bytes < self.short_threshold)
        self.shared, self.shared_top = _shared(frame, accepted)
        length = frame.finishes.index("length") if "length" in frame.finishes else -1
        self.truncated = frame.finish == length


def _shared(frame: Frame, accepted: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Rows whose answer (long enough to be distinctive) is given to SHARED_MIN_PROMPTS or more accepted prompts,
    and the ten most shared answers as (first row, count), most shared first."""
    eligible = frame.answer_rows  # scan.py keyed only the candidates, all accepted
    shared = np.zeros(len(frame), dtype=bool)
    if not eligible.size:
        return shared, []
    hashes = frame.answer_keys
    values, first, counts = np.unique(hashes, return_index=True, return_counts=True)
    many = counts >= SHARED_MIN_PROMPTS
    shared[eligible] = np.isin(hashes, values[many])
    order = np.lexsort((first[many], -counts[many]))[:10]  # ties by first occurrence, not by key
    positions = eligible[first[many][order]]
    return shared, list(zip(positions.tolist(), counts[many][order].tolist(), strict=True))


def percentiles(values: np.ndarray) -> dict[str, float | None]:
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if values.size == 0:
        return {"count": 0, **{f"p{q}": None for q in PERCENTILES}, "mean": None, "max": None}
    mean, top = float(values.mean(dtype=np.float64)), float(values.max())
    qs = np.percentile(values, PERCENTILES, overwrite_input=values.dtype.kind == "f")  # the copy above: reordered
    out: dict[str, float | None] = {"count": int(values.size)}
    out.update({f"p{q}": float(v) for q, v in zip(PERCENTILES, qs, strict=True)})
    out.update(mean=mean, max=top)
    return out


LENGTHS = (
    "reasoning_tokens",
    "answer_tokens",
    "completion_tokens",
    "prompt_tokens",
    "answer_bytes",
    "reasoning_bytes",
    "reasoning_answer_ratio",
)


def length_column(frame: Frame, name: str, rows: np.ndarray) -> np.ndarray:
    """One of the LENGTHS inspect reports, for `rows` (a mask), as float32 (NaN = unknown; counts are exact).
    One at a time, so a 1M-row report holds one short float column, not seven."""
    if name in frame.tokens:
        result: np.ndarray = frame.tokens[name][rows]
        return result
    if name == "answer_bytes":
        result = frame.answer_bytes[rows].astype(np.float32)
        return result
    if name == "reasoning_bytes":
        return frame.reasoning_bytes(rows)
    answer_tokens = frame.tokens["completion_tokens"][rows] - frame.tokens["reasoning_tokens"][rows]
    if name == "answer_tokens":
        result = answer_tokens
        return result
    with np.errstate(divide="ignore", invalid="ignore"):
        answer_tokens[answer_tokens <= 0] = np.nan
        ratio = frame.tokens["reasoning_tokens"][rows] / answer_tokens
        del answer_tokens
        unknown = np.flatnonzero(np.isnan(ratio))  # the token counts say nothing: the byte lengths instead
        if unknown.size:
            answer_bytes = frame.answer_bytes[rows][unknown].astype(np.float32)
            answer_bytes[answer_bytes <= 0] = np.nan
            ratio[unknown] = frame.reasoning_bytes(rows)[unknown] / answer_bytes
    result = ratio
    return result


def group_row(d: Derived, mask: np.ndarray) -> dict[str, Any]:
    """Counts, problem rates and medians of the rows in `mask`."""
    tally = {key: int(n[0]) for key, n in _tally(d, np.zeros(len(d.frame), dtype=np.int8), 1, mask).items()}
    completion = _accepted_completions(d, mask)
    answers = d.frame.answer_bytes[mask & d.accepted]
    return _row(
        tally,
        float(np.median(completion)) if completion.size else None,
        float(np.median(answers)) if answers.size else None,
    )


TALLY_ROWS = 1 << 16  # rows per step of `_tally`: its masks and bincount's int64 copy of the codes stay small


def _tally(d: Derived, codes: np.ndarray, n: int, within: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per group code (0..n-1): how many rows, accepted rows, checked rows and rows with each problem; counted
    TALLY_ROWS rows at a time (counts add up)."""
    f = d.frame
    out = {key: np.zeros(n, dtype=np.intp) for key in _TALLIED}
    for lo in range(0, len(f), TALLY_ROWS):
        at = slice(lo, lo + TALLY_ROWS)
        base = within[at] if within is not None else np.ones(f.rejected[at].size, dtype=bool)
        acc = base & d.accepted[at]
        checked = base & f.checked[at]
        flags = {
            "rows": base,
            "accepted": acc,
            "checked": checked,
            "empty": d.empty[at] & acc,
            "short": d.short[at] & acc,
            "shared": d.shared[at] & acc,
            "looping": f.looping[at] & checked,
            "truncated": d.truncated[at] & base,
        }
        here = codes[at]
        for key, m in flags.items():
            out[key] += np.bincount(here[m], minlength=n)
    return out


_TALLIED = ("rows", "accepted", "checked", "empty", "short", "shared", "looping", "truncated")


def _row(t: dict[str, int], completion_p50: float | None, answer_p50: float | None) -> dict[str, Any]:
    rows, acc, checked = t["rows"], t["accepted"], t["checked"]

    def share(key: str, n: int) -> float:
        return t[key] / n if n else 0.0

    return {
        "rows": rows,
        "accepted": acc,
        "rejected": rows - acc,
        "reject_rate": (rows - acc) / rows if rows else 0.0,
        "empty_answer_rate": share("empty", acc),
        "repetition_rate": share("looping", checked),
        "repetition_checked": checked,
        "short_rate": share("short", acc),
        "shared_rate": share("shared", acc),
        "truncated_rate": share("truncated", rows),
        "completion_tokens_p50": completion_p50,
        "answer_bytes_p50": answer_p50,
    }


def _accepted_completions(d: Derived, rows: np.ndarray, at: slice = slice(None)) -> np.ndarray:
    """The known completion lengths of the accepted rows among the rows `at` selected by the mask `rows`, sorted."""
    completion = d.frame.tokens["completion_tokens"][at][rows & d.accepted[at]]
    completion = completion[~np.isnan(completion)]
    completion.sort()
    result: np.ndarray = completion
    return result


def endpoint_table(d: Derived) -> dict[str, dict[str, Any]]:
    """`group_table` per endpoint, over the rows that reached one: a `bad_input` reject (or any row without an
    endpoint) never met a server, so it is neither a group of its own nor part of the others' rates."""
    f = d.frame
    served = np.ones(len(f), dtype=bool)
    if "" in f.endpoints:
        served &= f.endpoint != f.endpoints.index("")
    return group_table(d, f.endpoint, f.endpoints, within=served)


def group_table(
    d: Derived, codes: np.ndarray, names: list[str], *, same_kind: bool = False, within: np.ndarray | None = None
) -> dict[str, dict[str, Any]]:
    """One row per group, each compared with all the other rows pooled. `same_kind`: compare a group only with
    groups of its kind (shards with shards, rejects files with rejects files), since a rejects file is full of
    truncations by construction. `within`: only these rows count, as members and as the others.

    Linear in rows, not rows x groups: counts come from one bincount per measure, the others' counts are the
    totals minus the group's, and the others' median is found in the sorted totals (`_median_without`). A group's
    members are a slice of the rows when the codes ascend (the file index: rows come file by file), else a mask
    (a few endpoints): never an index array of every row.
    """
    f = d.frame
    n = len(names)
    groups = _tally(d, codes, n, within)
    kinds = f.rejected.astype(np.int8) if same_kind else np.zeros(len(f), dtype=np.int8)
    totals = _tally(d, kinds, 2, within)
    rows = np.ones(len(f), dtype=bool) if within is None else within
    universe = [_accepted_completions(d, (kinds == k) & rows) for k in (0, 1)]
    ascending = bool(np.all(codes[1:] >= codes[:-1]))
    bounds = np.searchsorted(codes, np.arange(n + 1)) if ascending else None
    table: dict[str, dict[str, Any]] = {}
    for code, name in sorted(enumerate(names), key=lambda pair: pair[1]):  # codes follow thread timing
        if not groups["rows"][code]:
            continue
        if bounds is not None:
            at = slice(int(bounds[code]), int(bounds[code + 1]))
            member = rows[at]
        else:
            at = slice(None)
            member = (codes == code) & rows
        kind = int(kinds[at][np.argmax(member)])
        mine = {key: int(v[code]) for key, v in groups.items()}
        rest = {key: int(totals[key][kind]) - mine[key] for key in mine}
        completion = _accepted_completions(d, member, at)
        answers = f.answer_bytes[at][member & d.accepted[at]]
        del member
        row = _row(
            mine,
            float(np.median(completion)) if completion.size else None,
            float(np.median(answers)) if answers.size else None,
        )
        row["flags"] = _flags(row, _row(rest, _median_without(universe[kind], completion), None))
        table[name] = row
    return table


def _median_without(values: np.ndarray, removed: np.ndarray) -> float | None:
    """np.median of the multiset `values` minus `removed` (both sorted; `removed` drawn from `values`)."""
    m = values.size - removed.size
    if m <= 0:
        return None
    return (_kth_without(values, removed, (m - 1) // 2) + _kth_without(values, removed, m // 2)) / 2


def _kth_without(values: np.ndarray, removed: np.ndarray, k: int) -> float:
    """The k-th smallest (from 0) of `values` minus `removed`: a binary search on the count of what is left."""
    lo, hi = 0, values.size - 1
    while lo < hi:
        mid = (lo + hi) // 2
        v = values[mid]
        left = np.searchsorted(values, v, "right") - np.searchsorted(removed, v, "right")
        if left >= k + 1:
            hi = mid
        else:
            lo = mid + 1
    return float(values[lo])


def _flags(row: dict[str, Any], rest: dict[str, Any]) -> list[str]:
    if row["rows"] < FLAG_MIN_ROWS or rest["rows"] == 0:
        return []
    flags = []
    for key in PROBLEMS:
        if key == "reject_rate" and (row["accepted"] == row["rows"] or row["accepted"] == 0):
            continue  # a shard holds only accepted rows and a rejects file only rejects: nothing to compare
        if row[key] >= FLAG_MIN_RATE and row[key] >= 2 * rest[key] + FLAG_MARGIN:
            flags.append(f"{key.removesuffix('_rate')} {row[key]:.0%} vs {rest[key]:.0%} elsewhere")
    mine, theirs = row["completion_tokens_p50"], rest["completion_tokens_p50"]
    if mine is not None and theirs and (mine < 0.5 * theirs or mine > 2 * theirs):
        flags.append(f"median completion {mine:.0f} tokens vs {theirs:.0f} elsewhere")
    return flags


def warnings(d: Derived, overall: dict[str, Any]) -> list[str]:
    """Run-level alarms that hold whatever the groups look like."""
    out = []
    empty = int((d.empty & d.accepted).sum())
    if empty:
        out.append(f"{empty} accepted rows have an empty answer")
    if overall["repetition_rate"] >= 0.01:
        out.append(f"{overall['repetition_rate']:.1%} of checked rows loop (degenerate repetition)")
    if overall["reject_rate"] >= 0.2:
        out.append(f"reject rate is {overall['reject_rate']:.0%}")
    if overall["shared_rate"] >= 0.05:
        out.append(f"{overall['shared_rate']:.0%} of accepted answers are shared by {SHARED_MIN_PROMPTS}+ prompts")
    return out


def counts(codes: np.ndarray, names: list[str], mask: np.ndarray) -> dict[str, int]:
    values, n = np.unique(codes[mask], return_counts=True)
    tally = zip(values.tolist(), n.tolist(), strict=True)
    ordered = sorted(((names[c] or "(none)", n) for c, n in tally if c >= 0), key=lambda kv: (-kv[1], kv[0]))
    return dict(ordered)


def histogram(values: np.ndarray, bins: int = 40) -> dict[str, list[float]]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"edges": [], "counts": []}
    top = float(np.percentile(values, 99.5)) or 1.0
    hist, edges = np.histogram(np.clip(values, 0, top), bins=bins, range=(0, top))
    return {"edges": edges.tolist(), "counts": hist.tolist()}


def timeline(d: Derived, times: Callable[[int], np.ndarray], bins: int = 40) -> dict[str, Any]:
    """Accepted and rejected-by-reason counts per time bucket of created_at; `times(i)` gives the times of file
    i's rows (scan.created_at), read a file at a time: counts add up, whatever the order."""
    f = d.frame
    if f.created_span is None:
        return {"edges": [], "accepted": [], "by_reason": {}}
    lo, hi = f.created_span
    edges = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    acc = np.zeros(bins, dtype=np.int64)
    by_code = {code: np.zeros(bins, dtype=np.int64) for code in range(len(f.reasons))}
    for fi in range(len(f.files)):
        start, end = int(f.bounds[fi]), int(f.bounds[fi + 1])
        if start == end:
            continue
        at = times(fi)
        ok = ~np.isnan(at)
        acc += np.histogram(at[ok & d.accepted[start:end]], bins=edges)[0]
        reason = f.reason[start:end]
        for code, counts in by_code.items():
            counts += np.histogram(at[ok & (reason == code)], bins=edges)[0]
    by_reason = {name: by_code[code].tolist() for code, name in sorted(enumerate(f.reasons), key=lambda pair: pair[1])}
    return {"edges": edges.tolist(), "accepted": acc.tolist(), "by_reason": by_reason}
