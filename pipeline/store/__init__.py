"""The durable store of a run: journal, atomic Parquet parts, worker partition, resume.

See DESIGN.md sections 5 and 6 for the invariants, and `run_store` for how they are kept.
"""

from .doneset import DoneSet
from .journal import JournalEntry
from .partition import id_hash, id_hashes, owns, owns_many
from .run_store import ResumeState, RunStore
from .scan import committed_ids, iter_journal_rows

__all__ = [
    "DoneSet",
    "JournalEntry",
    "ResumeState",
    "RunStore",
    "committed_ids",
    "id_hash",
    "id_hashes",
    "iter_journal_rows",
    "owns",
    "owns_many",
]
