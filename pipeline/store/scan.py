"""Read a RUN_DIR without taking any lock: for status and inspect while a run is in progress.

The view is consistent enough to count: committed parts are complete files, journals are read line by line (a
torn tail is skipped). A journal row may also be committed already (a crash between commit and rotation), so
count journal rows only if their id is not in `committed_ids`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .doneset import DoneSet
from .files import read_ids
from .index import CommittedIndex
from .journal import JournalEntry, list_journals, read_journal
from .layout import JOURNAL, REJECTS, SHARDS
from .partition import id_hash


def committed_ids(run_dir: Path) -> tuple[DoneSet, DoneSet]:
    """(accepted, rejected) id hashes of the committed parts; an id in both counts as accepted."""
    index = CommittedIndex(Path(run_dir))
    index.refresh()
    accepted = index.done(SHARDS)
    return accepted, index.done(REJECTS).difference(accepted)


def iter_journal_rows(run_dir: Path) -> Iterator[JournalEntry]:
    """Every readable entry of every journal (any worker), oldest seq first per worker."""
    for journal in list_journals(Path(run_dir) / JOURNAL):
        yield from read_journal(journal.path)


def duplicated_hashes(run_dir: Path) -> np.ndarray:
    """Hashes of ids committed more than once (in two files, or twice in one); normally empty."""
    index = CommittedIndex(Path(run_dir))
    index.refresh()
    return index.duplicated()


def duplicates(run_dir: Path, examples: int = 10) -> dict[str, Any]:
    """Ids committed more than once: `{count, examples: [{id, files}]}`, files relative to RUN_DIR.

    A resume settles them (recovery.settle); until then readers must know, and export must skip the repeats.
    """
    run_dir = Path(run_dir)
    index = CommittedIndex(run_dir)
    index.refresh()
    dups = index.duplicated()
    found: dict[str, list[str]] = {}
    for path in index.files_with(dups) if len(dups) else []:
        for i in read_ids(path):
            if (i in found or len(found) < examples) and np.isin(id_hash(i), dups):
                found.setdefault(i, []).append(str(path.relative_to(run_dir)))
    return {"count": len(dups), "examples": [{"id": i, "files": f} for i, f in found.items()]}
