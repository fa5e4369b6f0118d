"""What a RUN_DIR committed, read straight from its Parquet parts (never through the store's readers), and the one
exactly-once check over it.

Every reader here lists a folder's parts the same way (`<folder>/*.parquet` by name: the store writes a part under a
hidden `.tmp` name and renames it, so each listed part is complete). `committed` and `placements` read every column
of each part, as does `committed_ids(whole=True)`, so a damaged part fails the test instead of passing on its id
column alone.

`assert_exactly_once` asks the store's own duplicate scan (`pipeline.store.scan.duplicates`, the index `regen
status` and resume read) and cross-checks it against the ids read here, so the check fails if the scan ever missed
a duplicate, and names the duplicated ids and their files when it finds one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pipeline.store.scan import duplicates

FOLDERS = ("shards", "rejects")


def _parts(run_dir: Path, sub: str, whole: bool) -> Iterator[tuple[Path, list[str]]]:
    for path in sorted((run_dir / sub).glob("*.parquet")):
        table = pq.read_table(path) if whole else pq.read_table(path, columns=["id"])
        yield path, table.column("id").to_pylist()


def committed_ids(run_dir: Path, sub: str, *, whole: bool = False) -> list[str]:
    """Every id of every committed part of `run_dir/sub` (shards or rejects), part by part in name order."""
    return [i for _, ids in _parts(run_dir, sub, whole) for i in ids]


def committed(run_dir: Path) -> Counter[str]:
    """How many times each id is committed, in shards and rejects together (exactly once: every count is 1); each
    part is read whole."""
    return Counter(i for sub in FOLDERS for i in committed_ids(run_dir, sub, whole=True))


def placements(run_dir: Path) -> dict[str, Counter[str]]:
    """{id: Counter("shards/<part>" or "rejects/<part>")}: where each committed id is, and how many times; each part
    is read whole."""
    placed: dict[str, Counter[str]] = {}
    for sub in FOLDERS:
        for path, ids in _parts(run_dir, sub, True):
            for i in ids:
                placed.setdefault(i, Counter())[f"{sub}/{path.name}"] += 1
    return placed


def read_rows(run_dir: Path, sub: str) -> list[dict[str, Any]]:
    """Every row of every committed part of `run_dir/sub`, part by part in name order."""
    rows: list[dict[str, Any]] = []
    for path in sorted((run_dir / sub).glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def assert_exactly_once(
    run_dir: Path, ids: list[str] | set[str], *, exact: bool = False
) -> tuple[list[str], list[str]]:
    """Every id of `ids` committed exactly once, in shards or rejects (with `exact`, nothing else committed);
    returns (accepted ids, rejected ids) as read from the parts."""
    scan = duplicates(Path(run_dir))
    assert scan["count"] == 0, f"ids committed more than once: {scan['examples']}"
    good, bad = committed_ids(Path(run_dir), "shards"), committed_ids(Path(run_dir), "rejects")
    both = Counter(good + bad)
    assert [k for k, v in both.items() if v > 1] == [], "the store's duplicate scan missed these"
    assert set(ids) <= set(both), f"missing: {sorted(set(ids) - set(both))[:5]}"
    if exact:
        assert set(both) == set(ids), f"not asked for: {sorted(set(both) - set(ids))[:5]}"
    return good, bad
