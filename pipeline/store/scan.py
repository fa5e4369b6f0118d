"""Read a RUN_DIR without taking any lock: for status and inspect while a run is in progress.

The view is consistent enough to count: committed parts are complete files, journals are read line by line (a
torn tail is skipped). A journal row may also be committed already (a crash between commit and rotation), so
count journal rows only if their id is not in `committed_ids`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .doneset import DoneSet
from .files import REJECTS, SHARDS
from .index import CommittedIndex
from .journal import JournalEntry, list_journals, read_journal


def committed_ids(run_dir: Path) -> tuple[DoneSet, DoneSet]:
    """(accepted, rejected) id hashes of the committed parts; an id in both counts as accepted."""
    index = CommittedIndex(Path(run_dir))
    index.refresh()
    accepted = index.done(SHARDS)
    return accepted, index.done(REJECTS).difference(accepted)


def iter_journal_rows(run_dir: Path) -> Iterator[JournalEntry]:
    """Every readable entry of every journal (any worker), oldest seq first per worker."""
    for journal in list_journals(Path(run_dir) / "journal"):
        yield from read_journal(journal.path)
