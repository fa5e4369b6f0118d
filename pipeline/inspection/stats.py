"""Quality statistics over a scanned frame: overall, per shard and per endpoint, with the outliers flagged.

A group (shard or endpoint) is flagged when one of its problem rates is both material and well above the rate
of all the other rows pooled (`rate >= FLAG_MIN_RATE and rate >= 2 * rest + FLAG_MARGIN`), or when its median
completion length is less than half or more than twice everyone else's. One bad shard of ten thus stands out
even when it barely moves the overall numbers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .scan import SHARED_MIN_BYTES, Frame

PERCENTILES = (1, 10, 50, 90, 99)
SHARED_MIN_PROMPTS = 3  # an answer given to this many prompts is "shared"...
SHORT_MAX_BYTES = 32  # an answer is suspiciously short under min(this, SHORT_MEDIAN_SHARE x median)
SHORT_MEDIAN_SHARE = 0.1
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
        median = float(np.median(frame.answer_bytes[accepted])) if accepted.any() else 0.0
        self.short_threshold = max(1, int(min(SHORT_MAX_BYTES, SHORT_MEDIAN_SHARE * median)))
        self.empty = frame.answer_bytes == 0
        self.short = (frame.answer_bytes > 0) & (frame.answer_bytes < self.short_threshold)
        self.shared, self.shared_top = _shared(frame, accepted)
        length = frame.finishes.index("length") if "length" in frame.finishes else -1
        self.truncated = frame.finish == length


def _shared(frame: Frame, accepted: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Rows whose answer (long enough to be distinctive) is given to SHARED_MIN_PROMPTS or more accepted prompts."""
    eligible = accepted & (frame.answer_bytes >= SHARED_MIN_BYTES)
    shared = np.zeros(len(frame), dtype=bool)
    if not eligible.any():
        return shared, []
    hashes = frame.answer_hash[eligible]
    values, first, counts = np.unique(hashes, return_index=True, return_counts=True)
    many = counts >= SHARED_MIN_PROMPTS
    shared[np.flatnonzero(eligible)] = np.isin(hashes, values[many])
    order = np.argsort(-counts[many], kind="stable")[:10]
    positions = np.flatnonzero(eligible)[first[many][order]]
    return shared, list(zip(positions.tolist(), counts[many][order].tolist(), strict=True))


def percentiles(values: np.ndarray) -> dict[str, float | None]:
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if values.size == 0:
        return {"count": 0, **{f"p{q}": None for q in PERCENTILES}, "mean": None, "max": None}
    qs = np.percentile(values, PERCENTILES)
    out: dict[str, float | None] = {"count": int(values.size)}
    out.update({f"p{q}": float(v) for q, v in zip(PERCENTILES, qs, strict=True)})
    out.update(mean=float(values.mean()), max=float(values.max()))
    return out


def length_columns(frame: Frame) -> dict[str, np.ndarray]:
    """The length measures inspect reports, as float arrays (NaN = unknown)."""
    completion = frame.tokens["completion_tokens"]
    reasoning = frame.tokens["reasoning_tokens"]
    answer_tokens = completion - reasoning
    with np.errstate(divide="ignore", invalid="ignore"):
        by_tokens = reasoning / np.where(answer_tokens > 0, answer_tokens, np.nan)
        by_chars = frame.reasoning_bytes / np.where(frame.answer_bytes > 0, frame.answer_bytes, np.nan)
    ratio = np.where(np.isnan(by_tokens), by_chars, by_tokens)
    return {
        "reasoning_tokens": reasoning,
        "answer_tokens": answer_tokens,
        "completion_tokens": completion,
        "prompt_tokens": frame.tokens["prompt_tokens"],
        "answer_bytes": frame.answer_bytes.astype(np.float64),
        "reasoning_bytes": frame.reasoning_bytes.astype(np.float64),
        "reasoning_answer_ratio": ratio,
    }


def group_row(d: Derived, mask: np.ndarray) -> dict[str, Any]:
    """Counts, problem rates and medians of the rows in `mask`."""
    f = d.frame
    rows = int(mask.sum())
    acc = mask & d.accepted
    n_acc = int(acc.sum())

    def rate(flags: np.ndarray, base: np.ndarray, n: int) -> float:
        return float((flags & base).sum()) / n if n else 0.0

    completion = f.tokens["completion_tokens"][acc]
    completion = completion[~np.isnan(completion)]
    return {
        "rows": rows,
        "accepted": n_acc,
        "rejected": rows - n_acc,
        "reject_rate": (rows - n_acc) / rows if rows else 0.0,
        "empty_answer_rate": rate(d.empty, acc, n_acc),
        "repetition_rate": rate(f.looping, mask, rows),
        "short_rate": rate(d.short, acc, n_acc),
        "shared_rate": rate(d.shared, acc, n_acc),
        "truncated_rate": rate(d.truncated, mask, rows),
        "completion_tokens_p50": float(np.median(completion)) if completion.size else None,
        "answer_bytes_p50": float(np.median(f.answer_bytes[acc])) if n_acc else None,
    }


def group_table(
    d: Derived, codes: np.ndarray, names: list[str], *, same_kind: bool = False
) -> dict[str, dict[str, Any]]:
    """One row per group. `same_kind`: compare a group only with groups of its kind (shards with shards,
    rejects files with rejects files), since a rejects file is full of truncations by construction."""
    table: dict[str, dict[str, Any]] = {}
    for code, name in sorted(enumerate(names), key=lambda pair: pair[1]):  # codes follow thread timing
        mask = codes == code
        if not mask.any():
            continue
        rest = ~mask
        if same_kind:
            rest &= d.frame.rejected == d.frame.rejected[mask][0]
        row = group_row(d, mask)
        row["flags"] = _flags(row, group_row(d, rest))
        table[name] = row
    return table


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
        out.append(f"{overall['repetition_rate']:.1%} of rows loop (degenerate repetition)")
    if overall["reject_rate"] >= 0.2:
        out.append(f"reject rate is {overall['reject_rate']:.0%}")
    if overall["shared_rate"] >= 0.05:
        out.append(f"{overall['shared_rate']:.0%} of accepted answers are shared by {SHARED_MIN_PROMPTS}+ prompts")
    return out


def counts(codes: np.ndarray, names: list[str], mask: np.ndarray) -> dict[str, int]:
    tally = Counter(codes[mask].tolist())
    ordered = sorted(((names[c], n) for c, n in tally.items() if c >= 0), key=lambda kv: (-kv[1], kv[0]))
    return dict(ordered)


def histogram(values: np.ndarray, bins: int = 40) -> dict[str, list[float]]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"edges": [], "counts": []}
    top = float(np.percentile(values, 99.5)) or 1.0
    hist, edges = np.histogram(np.clip(values, 0, top), bins=bins, range=(0, top))
    return {"edges": edges.tolist(), "counts": hist.tolist()}


def timeline(d: Derived, bins: int = 40) -> dict[str, Any]:
    """Accepted and rejected-by-reason counts per time bucket of created_at."""
    f = d.frame
    ok = ~np.isnan(f.created_at)
    if not ok.any():
        return {"edges": [], "accepted": [], "by_reason": {}}
    lo, hi = float(f.created_at[ok].min()), float(f.created_at[ok].max())
    edges = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    acc, _ = np.histogram(f.created_at[ok & d.accepted], bins=edges)
    by_reason = {}
    for code, name in sorted(enumerate(f.reasons), key=lambda pair: pair[1]):
        hist, _ = np.histogram(f.created_at[ok & (f.reason == code)], bins=edges)
        by_reason[name] = hist.tolist()
    return {"edges": edges.tolist(), "accepted": acc.tolist(), "by_reason": by_reason}
