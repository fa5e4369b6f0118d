"""`regen inspect`: the quality report of a RUN_DIR as plain data (rates, distributions, outliers, a sample)."""

from __future__ import annotations

import fnmatch
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ..store.files import DataFile, damaged_parts, reject_files, shard_files
from ..store.manifest import manifest_or_empty, simulated_endpoints
from . import pending, stats
from .frame import Frame
from .sample import choose, fetch_rows, sample_entry
from .scan import SHARED_MIN_BYTES, SHARED_MIN_PROMPTS, TEXT_SAMPLE_ROWS, Filters, created_at, scan
from .speculative import spec_report
from .where import WhereError, parse_where

EXAMPLES = 5
PREVIEW_CHARS = 120


def inspect_run(
    run_dir: Path,
    *,
    sample: int = 5,
    seed: int = 0,
    shard: str | None = None,
    reason: str | None = None,
    endpoint: str | None = None,
    where: str | None = None,
    reasoning: bool = True,
    text_sample_rows: int = TEXT_SAMPLE_ROWS,
) -> dict[str, Any]:
    """Stats over the finished rows of a run (shards and rejects, and the journals' rows not committed yet, labelled
    `journal/...`: pending.py) that pass the filters, plus `sample` rows.

    `shard` selects files by name or glob ("worker-0-*", "rejects/x.parquet"); `reason` keeps rejects with that
    reason code; `endpoint` keeps rows served by that URL; `where` is a column condition (see where.py).
    Counts, rates and percentiles cover every row; the looping check covers up to `text_sample_rows` rows per
    file, whole row groups spread over it (`repetition.checked` of `repetition.of` rows; see scan.py), and
    reasoning byte lengths those same rows.
    `reasoning=False` never reads the reasoning text: the looping check then sees answers only.
    """
    run_dir = Path(run_dir)
    committed = shard_files(run_dir) + reject_files(run_dir)
    with tempfile.TemporaryDirectory(prefix="regen-inspect-") as tmp:
        entries = pending.uncommitted(run_dir, committed)
        journal = pending.journal_files(run_dir, entries, Path(tmp))
        report = _inspect(run_dir, committed, journal, sample, seed, shard, reason, endpoint, where, reasoning,
                          text_sample_rows)  # fmt: skip
    kinds = [e["kind"] for e in entries.values()]
    report["journal"] = {"accepted": kinds.count("accepted"), "rejected": kinds.count("rejected")}
    return report


def _inspect(
    run_dir: Path,
    committed: list[DataFile],
    journal: list[DataFile],
    sample: int,
    seed: int,
    shard: str | None,
    reason: str | None,
    endpoint: str | None,
    where: str | None,
    reasoning: bool,
    text_sample_rows: int,
) -> dict[str, Any]:
    files = _select(committed + journal, shard)
    columns: set[str] = set()
    for f in files:
        columns.update(pq.read_schema(f.path).names)
    filters = Filters(reason, endpoint, parse_where(where, columns) if where else None, reasoning)
    frame = scan(files, filters, text_sample_rows=text_sample_rows)
    d = stats.Derived(frame)
    report = _overview(d)
    report.update(
        run_dir=str(run_dir),
        filters={"shard": shard, "reason": reason, "endpoint": endpoint, "where": where},
        files=len(files),
        damaged=[str(d) for d in damaged_parts(run_dir)],
        simulated_endpoints=simulated_endpoints(manifest_or_empty(run_dir)),
    )
    report["simulated"] = bool(report["simulated_endpoints"])  # the rows are the simulator's filler, not a model's
    report.update(_problems(d))
    labels = [_label(f) for f in frame.files]
    report["per_shard"] = stats.group_table(d, frame.file_idx, labels, same_kind=True)
    report["per_endpoint"] = stats.endpoint_table(d)  # rows that never reached a server are no endpoint
    report["spec_accept_length"] = spec_report(frame, d.accepted, labels)  # the serving model's own, per turn
    report["flagged"] = [
        {"kind": kind, "name": name, "flags": row["flags"]}
        for kind, table in (("shard", report["per_shard"]), ("endpoint", report["per_endpoint"]))
        for name, row in table.items()
        if row["flags"]
    ]
    report["sample"] = _sample(frame, sample, seed, reason is not None)
    report["sample_seed"] = seed
    return report


def _select(files: list[DataFile], shard: str | None) -> list[DataFile]:
    if shard is None:
        return files
    chosen = [f for f in files if any(fnmatch.fnmatch(x, shard) for x in (f.name, f.path.stem, _label(f)))]
    if not chosen:
        raise WhereError(f"--shard {shard!r} matches no file under shards/ or rejects/")
    return chosen


_label = pending.file_label


def _overview(d: stats.Derived) -> dict[str, Any]:
    frame = d.frame
    everything = np.ones(len(frame), dtype=bool)
    overall = stats.group_row(d, everything)
    basis = d.accepted if d.accepted.any() else everything
    answer_tokens = stats.length_column(frame, "answer_tokens", basis)
    answers = "answer_tokens" if not np.isnan(answer_tokens).all() else "answer_bytes"
    del answer_tokens
    percentiles, histograms = {}, {}
    for name in stats.LENGTHS:
        values = stats.length_column(frame, name, basis)
        percentiles[name] = stats.percentiles(values)
        if name in ("reasoning_tokens", answers):
            histograms[name] = stats.histogram(values)
    return {
        "rows": overall["rows"],
        "accepted": overall["accepted"],
        "rejected": overall["rejected"],
        "reject_rate": overall["reject_rate"],
        "rejected_by_reason": stats.counts(frame.reason, frame.reasons, frame.rejected),
        "finish_reasons": stats.counts(frame.finish, frame.finishes, everything),
        "finish_reasons_accepted": stats.counts(frame.finish, frame.finishes, d.accepted),
        "percentiles_of": "accepted" if d.accepted.any() else "all",
        "percentiles": percentiles,
        "overall": overall,
        "warnings": stats.warnings(d, overall),
        "histograms": {"reasoning_tokens": histograms["reasoning_tokens"], answers: histograms[answers]},
        "timeline": stats.timeline(d, lambda fi: created_at(frame, fi)),
    }


def _problems(d: stats.Derived) -> dict[str, Any]:
    frame = d.frame
    n_acc = int(d.accepted.sum())
    top = d.shared_top
    previews = fetch_rows(frame.files, [_loc(frame, pos) for pos, _ in top], columns=["id", "answer"])
    shared_rows = int((d.shared & d.accepted).sum())
    return {
        "duplicates_answers": {
            "min_prompts": SHARED_MIN_PROMPTS,
            "min_bytes": SHARED_MIN_BYTES,
            "rows": shared_rows,
            "rate": shared_rows / n_acc if n_acc else 0.0,
            "top": [
                {"count": count, "example_id": row["id"], "answer": _preview(row.get("answer") or "")}
                for (_, count), row in zip(top, previews, strict=True)
            ],
        },
        "repetition": {
            **_examples(frame, frame.looping, int(frame.checked.sum())),
            "checked": int(frame.checked.sum()),
            "of": len(frame),
        },
        "short_answers": {
            "threshold_bytes": d.short_threshold,
            **_examples(frame, d.short & d.accepted, n_acc),
        },
        "empty_answers": _examples(frame, d.empty & d.accepted, n_acc),
    }


def _examples(frame: Frame, mask: np.ndarray, base: int) -> dict[str, Any]:
    rows = int(mask.sum())
    positions = np.flatnonzero(mask)[:EXAMPLES]
    found = fetch_rows(frame.files, [_loc(frame, int(p)) for p in positions], columns=["id"])
    return {"rows": rows, "rate": rows / base if base else 0.0, "examples": [r["id"] for r in found]}


def _loc(frame: Frame, pos: int) -> tuple[int, int]:
    return frame.file_of(pos), int(frame.row[pos])


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _sample(frame: Frame, n: int, seed: int, from_rejects: bool) -> list[dict[str, Any]]:
    accepted = ~frame.rejected
    pool = np.flatnonzero(accepted if accepted.any() and not from_rejects else np.ones(len(frame), dtype=bool))
    picked = pool[choose(pool.size, n, seed)]
    rows = fetch_rows(frame.files, [_loc(frame, int(p)) for p in picked])
    return [sample_entry(row) for row in rows]
