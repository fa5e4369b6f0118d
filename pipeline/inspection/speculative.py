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
    """{of, overall, by_shard, by_endpoint, by_turn, by_length}; `labels` names each of `frame.files`."""
    basis = accepted if accepted.any() else np.ones(len(frame), dtype=bool)
    parts, shard = [], []
    for fi, f in enumerate(frame.files):
        rows = np.sort(frame.row[basis & (frame.file_idx == fi)])
        turns = acceptance.file_turns(f.path, rows) if rows.size else acceptance.EMPTY
        if len(turns):
            parts.append(turns)
            shard.append(np.full(len(turns), fi, dtype=np.int32))
    turns = acceptance.concat(parts)
    codes = np.concatenate(shard) if shard else np.empty(0, np.int32)
    by_shard = {labels[fi]: acceptance.summary(turns.take(codes == fi)) for fi in np.unique(codes).tolist()}
    return {
        "of": "accepted" if accepted.any() else "all",
        "overall": acceptance.summary(turns),
        "by_shard": dict(sorted(by_shard.items())),
        "by_endpoint": acceptance.by_endpoint(turns),
        "by_turn": acceptance.by_turn(turns),
        "by_length": acceptance.by_length(turns),
    }
