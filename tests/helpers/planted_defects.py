"""A dataset with planted defects for `regen audit` and the repair runs: row i holds what PLAN[i % len(PLAN)] says
(a defect of one kind in one assistant turn, or none), so every test knows which rows must fail, why and where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

SOURCES = ("forum", "support", "tutoring")


def planted_turn(kind: str, k: int) -> dict[str, Any]:
    """One stored assistant message with a planted defect (or none): reasoning in a field or inline."""
    text = f"The answer to part {k} is a short, clear sentence."
    thought = f"Let me think about part {k} step by step."
    return {
        "clean": {"role": "assistant", "content": text, "reasoning_content": thought},
        "inline": {"role": "assistant", "content": f"<think>\n{thought}\n</think>\n\n{text}"},
        "empty": {"role": "assistant", "content": ""},
        "truncated": {"role": "assistant", "content": f"<think>\n{thought} and then"},
        "marker": {"role": "assistant", "content": f"<think>{thought}</think>{text} </think> again"},
        "in_reasoning": {"role": "assistant", "content": "", "reasoning_content": f"{thought} {text}"},
        "no_reasoning": {"role": "assistant", "content": text},
    }[kind]


# kind of the defective turn → the reason the audit must give; PLAN[i % len(PLAN)] says what row i holds:
# (kind, which assistant turn is defective, number of assistant turns, trailing user turn without an answer)
REASON = {
    "empty": "empty_response",
    "truncated": "truncated",
    "marker": "think_marker",
    "in_reasoning": "answer_in_reasoning",
    "no_reasoning": "empty_reasoning",
    "missing": "empty_response",
}
PLAN: list[tuple[str, int, int]] = [
    ("clean", 0, 1),
    ("clean", 0, 3),
    ("inline", 0, 2),
    ("empty", 0, 1),
    ("empty", 2, 3),
    ("truncated", 1, 2),
    ("marker", 0, 2),
    ("in_reasoning", 1, 3),
    ("no_reasoning", 0, 1),
    ("missing", 1, 2),
    ("clean", 1, 2),
]


def planted_row(i: int, *, with_id: bool = True) -> tuple[dict[str, Any], str | None, int | None]:
    """Row i of the planted dataset, the reason it must fail with (None: clean) and the failing turn's index."""
    kind, bad, n = PLAN[i % len(PLAN)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}] if i % 2 else []
    for k in range(n):
        messages.append({"role": "user", "content": f"Question {i}, part {k}?"})
        if kind == "missing" and k == bad:
            break  # the conversation ends with an unanswered user turn
        messages.append(planted_turn(kind if k == bad and kind not in ("clean", "inline") else "clean", k))
    if kind == "inline":
        messages = [planted_turn("inline", 0) if m["role"] == "assistant" else m for m in messages]
    row: dict[str, Any] = {"id": f"row-{i:05d}"} if with_id else {}
    row.update(messages=messages, source=SOURCES[i % 3], score=i * 0.5)
    reason = REASON.get(kind)
    return row, reason, bad if reason else None


def write_planted(path: Path, n: int, *, with_id: bool = True) -> list[tuple[dict[str, Any], str | None, int | None]]:
    rows = [planted_row(i, with_id=with_id) for i in range(n)]
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist([r for r, _, _ in rows]), path)
    else:
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r, _, _ in rows))
    return rows
