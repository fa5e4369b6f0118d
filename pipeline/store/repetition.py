"""Repetition the model ended itself, as the committed rows hold it: how many accepted rows keep a verbatim
repeating run (`repetition_chars` > 0, measured by the validator with pipeline/loops.py's text rule) and the
longest. Such rows are kept on purpose (an answer that repeats because it was asked to, validate.reject_looping
"unfinished"); `regen status` and the dataset card count them so a person sees how many there are.

Only the numeric `repetition_chars` column is read, never a text. Files written before schema 3 have no
measure: their rows are not counted as measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

COLUMN = "repetition_chars"


@dataclass(frozen=True, slots=True)
class Count:
    measured: int = 0  # rows whose repetition was measured
    repetitive: int = 0  # ... of which keep a repeating run
    longest: int = 0  # the longest run's characters

    def __add__(self, other: Count) -> Count:
        return Count(
            self.measured + other.measured, self.repetitive + other.repetitive, max(self.longest, other.longest)
        )


def file_count(path: Path) -> Count:
    """The count of one committed Parquet part (nothing measured when it predates the column)."""
    pfile = pq.ParquetFile(path)
    if COLUMN not in pfile.schema_arrow.names:
        return Count()
    column = pfile.read(columns=[COLUMN]).column(COLUMN).drop_null()
    if len(column) == 0:
        return Count()
    positive = pc.sum(pc.greater(column, 0)).as_py() or 0
    return Count(len(column), int(positive), int(pc.max(column).as_py() or 0))


def row_count(rows: Iterable[Mapping[str, Any]]) -> Count:
    """The count of rows as dicts (a journal's accepted rows not committed yet)."""
    values = [v for v in (row.get(COLUMN) for row in rows) if isinstance(v, int)]
    return Count(len(values), sum(v > 0 for v in values), max(values, default=0))


def summary(counts: Iterable[Count]) -> dict[str, Any]:
    """{measured, rows, share, longest_chars}: `rows` of the `measured` accepted rows keep repetition."""
    total = sum(counts, Count())
    share = total.repetitive / total.measured if total.measured else 0.0
    return {"measured": total.measured, "rows": total.repetitive, "share": share, "longest_chars": total.longest}
