"""The commit log of a run in object storage: which uploaded parts are committed.

An object store has no rename, so a part cannot appear complete under its final name the way it does on a
filesystem. Instead a part is uploaded under a unique key (invisible: nothing refers to it yet), then committed by
one small record, `RUN/_regen/log/{n:012d}.json`, written with `If-None-Match: *`:

    {"add": {"shards/part-w0-00003-1a2b3c4d.parquet": {"rows": 512, "size": 3811230}}, "remove": [...], "by": ...}

Replaying the records in order gives the committed parts; every reader lists parts this way and nothing else, so an
upload whose record was never written (a crash, a lost race) is an orphan nobody sees, deleted later by its worker
or once it is old (`remote.clean_orphans`). Only one writer can create record n: a loser re-reads the records it
missed and tries n + 1 (optimistic concurrency). A record that removes parts (a rewrite, a merge, a quarantine)
commits only if every part it removes is still committed at that point: two rewrites of one part cannot both win.
One record adds and removes atomically, so a merge or a rewrite is seen whole or not at all.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import orjson

from ..errors import CommitLogLostError, OutputError
from .layout import PART_KINDS
from .objects import ConditionFailed, Objects

LOG = "_regen/log/"
LOST_AFTER_S = 3600.0  # a part this old with no record at all is not an upload whose first commit is under way
_RECORD = re.compile(r"(\d{12})\.json$")


class CommitConflict(OutputError):
    """Another process removed a part this commit meant to remove (two rewrites of one part at once)."""


@dataclass(slots=True)
class Log:
    """The committed parts as of record `n` (-1: no record yet): key relative to the run -> {rows, size}."""

    n: int = -1
    parts: dict[str, dict[str, int]] = field(default_factory=dict)

    def apply(self, n: int, record: Mapping[str, Any]) -> None:
        for key in record.get("remove", ()):
            self.parts.pop(key, None)
        self.parts.update(record.get("add", {}))
        self.n = n

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "parts": self.parts}

    @classmethod
    def from_json(cls, data: Any) -> Log:
        if not isinstance(data, dict):
            return cls()
        return cls(int(data.get("n", -1)), dict(data.get("parts", {})))


def record_key(objects: Objects, n: int) -> str:
    return objects.uri.key(f"{LOG}{n:012d}.json")


def catch_up(objects: Objects, log: Log) -> Log:
    """`log` brought up to the newest record (records after `log.n` are read, in order). CommitLogLostError when
    the bucket lost records: the one `log` ends at, any before a later one (a writer takes n + 1 only after record
    n exists, so a gap is a loss), or all of them under parts older than any commit takes."""
    listed = {int(m[1]) for key, _, _ in objects.listing(objects.uri.key(LOG)) if (m := _RECORD.search(key))}
    if log.n >= 0 and log.n not in listed:
        _lost(objects, f"record {log.n:012d}, which this node read, is gone")
    expected = log.n + 1
    for n in sorted(k for k in listed if k > log.n):
        if n != expected:
            _lost(objects, f"records {expected:012d} to {n - 1:012d} are missing before {n:012d}")
        got = objects.get(record_key(objects, n))
        if got is None:
            _lost(objects, f"record {n:012d} was listed, then gone")
        log.apply(n, orjson.loads(got[0]))
        expected = n + 1
    if log.n < 0:
        _check_no_parts(objects)
    return log


def _check_no_parts(objects: Objects) -> None:
    """No record at all: parts older than any commit takes mean the log was lost, not that nothing was committed
    (an upload whose first record is still being written is young)."""
    old = time.time() - LOST_AFTER_S
    for kind in PART_KINDS:
        if any(
            modified < old
            for key, modified, _ in objects.listing(objects.uri.key(f"{kind}/"))
            if key.endswith(".parquet")
        ):
            _lost(objects, f"it has no record, but {kind}/ holds parts")


def _lost(objects: Objects, what: str) -> NoReturn:
    raise CommitLogLostError(
        f"{objects.uri}: the bucket lost its commit log ({what}): it was emptied, restored from an older copy, or "
        f"{LOG} was deleted, so it no longer says which parts are committed. Nothing more was written. To recover, "
        f"restore {LOG} from a backup of the bucket; or keep the parts this node holds (the working copy under "
        "output.journal_dir: its shards/ and rejects/) and start the run over at a new output.dir"
    )


def commit(objects: Objects, log: Log, add: dict[str, dict[str, int]], remove: list[str]) -> Log:
    """Write the record that commits `add` and removes `remove`; `log` (updated in place) is the state it
    applies to. Raises CommitConflict if a part in `remove` is no longer committed."""
    record = {"add": add, "remove": remove, "by": f"{socket.gethostname()}:{os.getpid()}", "at": time.time()}
    data = orjson.dumps(record)
    while True:
        gone = [key for key in remove if key not in log.parts]
        if gone:
            raise CommitConflict(
                f"{objects.uri}: {gone[0]} was rewritten or removed by another process meanwhile; "
                "nothing of this change was committed. Rerun to resume from the committed state"
            )
        try:
            objects.put(record_key(objects, log.n + 1), data, if_none_match=True)
        except ConditionFailed:
            catch_up(objects, log)  # another writer took n + 1: read what it did and try after it
            continue
        log.apply(log.n + 1, record)
        return log
