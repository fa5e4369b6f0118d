"""`regen inspect`'s speculative acceptance: the serving model's own acceptance on the inspected rows, the baseline a
new draft model must beat on exactly this data (store/acceptance.py reads it and says what it measures).

Over the accepted rows that pass inspect's filters (every selected row when none is accepted, as the length
percentiles do), one sample per generated turn: overall, and by shard, by endpoint, by turn index and by output
length bucket. Only the numeric leaves of the selected rows are read, file by file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..store import acceptance
from .frame import Frame


def spec_report(frame: Frame, accepted: np.ndarray, labels: list[str]) -> dict[str, Any]:
    """{of, overall, by_shard, by_endpoint, by_turn, by_length}; `labels` names each of `frame.files`. A file's
    turns at a time (acceptance.Tally), never the whole selection's."""
    basis = accepted if accepted.any() else np.ones(len(frame), dtype=bool)
    tally = acceptance.Tally(["shard", "endpoint", "turn", "length"])
    for fi, f in enumerate(frame.files):
        at = slice(int(frame.bounds[fi]), int(frame.bounds[fi + 1]))  # rows come file by file
        rows = np.sort(frame.row[at][basis[at]])
        if rows.size:
            _add(tally, acceptance.file_turns(f.path, rows), fi)
    by_shard = {labels[fi]: figures for fi, figures in tally.by("shard").items()}
    return {
        "of": "accepted" if accepted.any() else "all",
        "overall": tally.summary(),
        "by_shard": dict(sorted(by_shard.items())),
        "by_endpoint": tally.by("endpoint"),
        "by_turn": {str(k): figures for k, figures in tally.by("turn").items()},
        "by_length": {acceptance.LENGTH_LABELS[b]: figures for b, figures in tally.by("length").items()},
    }


def _add(tally: acceptance.Tally, turns: acceptance.Turns, fi: int) -> None:
    index, inverse = np.unique(turns.turn, return_inverse=True)
    tally.add(
        turns,
        {
            "shard": (np.zeros(len(turns), np.int64), [fi]),
            "endpoint": (turns.endpoint, turns.endpoints),
            "turn": (inverse, index.tolist()),
            "length": (acceptance.length_bucket(turns.tokens), range(len(acceptance.LENGTH_LABELS))),
        },
    )
