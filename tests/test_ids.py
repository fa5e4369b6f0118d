"""A row's id (pipeline/inputs/ids.py) is one rule: the reader, `regen audit` and the repaired export give a row the
same id, or agree it has none, whatever its id field holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import Config, InputConfig
from pipeline.dataset.audit import AuditOptions, audit_dataset
from pipeline.dataset.repair import RepairOptions, export_repaired
from pipeline.inputs.ids import IdProblem, content_id, given_id, usable_id
from pipeline.inputs.reader import PromptReader
from pipeline.records import Prompt

MISSING = object()  # the row has no id field at all

# (what the id field holds, the id every reader of rows gives it; None = refused: no id, `bad_input` in a run)
HOSTILE: list[tuple[str, Any, str | None]] = [
    ("string", "row-1", "row-1"),
    ("int", 7, "7"),
    ("negative int", -3, "-3"),
    ("zero", 0, "0"),
    ("true", True, None),
    ("false", False, None),
    ("empty", "", None),
    ("blank", "   ", None),
    ("newline", "a\nb", None),
    ("nul", "a\x00b", None),
    ("tab", "a\tb", None),
    ("delete", "a\x7fb", None),
    ("float", 1.5, None),
    ("whole float", 2.0, None),
    ("list", [1], None),
    ("object", {"k": 1}, None),
    ("json null", None, None),
]


def _messages(k: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {k}?"}]  # no answer yet: every row fails the audit


def _rows(field: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {field: value, "messages": _messages(k), "decoy": "not-the-id"} for k, (_, value, _) in enumerate(HOSTILE)
    ]
    # no id field: a content hash; a `"id": null` row with the same conversation must not take it in the export
    rows.insert(0, {"messages": _messages(99), "decoy": "x"})
    rows.insert(0, {field: None, "messages": _messages(99), "decoy": "x"})
    if field != "id":
        rows.append({"id": "ignored", "messages": _messages(100)})  # `id` is just a column when id_field is another
    return rows


def _expected(field: str) -> list[str | None]:
    """The row's own id, a content hash for a row without one, None for a row whose id cannot be used."""
    hashed = content_id(_messages(99))
    out: list[str | None] = [None, hashed, *(want for _, _, want in HOSTILE)]
    return out + ([content_id(_messages(100))] if field != "id" else [])


def _reader_ids(path: Path, field: str) -> list[str | None]:
    reader = PromptReader(InputConfig(path=str(path), id_field=field))
    return [item.id if isinstance(item, Prompt) else None for batch in reader.iter_batches() for item in batch]


def _audit_ids(path: Path, field: str, tmp_path: Path) -> list[str | None]:
    """Every row fails the audit, so --ids-out names each: its id, or `row:<n>` when it has no usable one."""
    out = tmp_path / "failing.txt"
    report = audit_dataset(str(path), AuditOptions(id_field=field, jobs=1), ids_out=out)
    assert report["failing_rows"] == report["rows"]
    return [None if line.startswith("row:") else line for line in out.read_text().splitlines()]


def _repaired_ids(path: Path, field: str, accepted: list[str], tmp_path: Path) -> list[str | None]:
    """Which run result the repaired export pastes into each row (an answer names the id it was generated for;
    None: the row is written as it was)."""
    run = tmp_path / "run"
    (run / "shards").mkdir(parents=True)
    (run / "rejects").mkdir()
    cfg = Config(input=InputConfig(path=str(path), id_field=field))
    (run / "run.json").write_bytes(orjson.dumps({"config": cfg.to_dict()}))
    turns = [{"id": i, "turns": [{"reasoning": "r", "answer": f"for {i}", "endpoint": "sim"}]} for i in accepted]
    pq.write_table(pa.Table.from_pylist(turns), run / "shards" / "part-0.parquet")
    no_rejects = pa.table({"id": pa.array([], pa.string()), "reason": pa.array([], pa.string())})
    pq.write_table(no_rejects, run / "rejects" / "r.parquet")
    export_repaired(run, tmp_path / "out", RepairOptions())
    target = tmp_path / "out" / path.name
    if path.suffix == ".parquet":
        written = pq.read_table(target).to_pylist()
    else:
        written = [orjson.loads(line) for line in target.read_bytes().splitlines()]
    last = [row["messages"][-1] for row in written]
    return [m["content"].rpartition("for ")[2] if m["role"] == "assistant" else None for m in last]


def _check_all_three(path: Path, field: str, expected: list[str | None], tmp_path: Path) -> None:
    reader = _reader_ids(path, field)
    assert reader == expected
    hashed = {content_id(_messages(k)) for k in range(200)}
    assert _audit_ids(path, field, tmp_path) == [None if i in hashed else i for i in expected]  # `row:<n>`, no hash
    assert _repaired_ids(path, field, [i for i in reader if i is not None], tmp_path) == expected


@pytest.mark.parametrize("field", ["id", "uid"])
def test_reader_audit_and_repair_agree_on_hostile_ids(tmp_path: Path, field: str) -> None:
    path = tmp_path / "in" / "data.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in _rows(field)))
    _check_all_three(path, field, _expected(field), tmp_path)


def test_a_parquet_null_is_no_id_for_all_three(tmp_path: Path) -> None:
    """A column cannot tell a missing value from a null: a null id is a content hash everywhere, not a refusal."""
    path = tmp_path / "in" / "data.parquet"
    path.parent.mkdir()
    ids = [None, "ok", "", "a\nb", "  "]
    pq.write_table(pa.Table.from_pylist([{"id": i, "messages": _messages(k)} for k, i in enumerate(ids)]), path)
    _check_all_three(path, "id", [content_id(_messages(0)), "ok", None, None, None], tmp_path)


@pytest.mark.parametrize(("name", "value", "want"), HOSTILE, ids=[name for name, _, _ in HOSTILE])
def test_the_rule_itself(name: str, value: Any, want: str | None) -> None:
    row = {"uid": value}
    assert usable_id(row, "uid", json_row=True) == want
    if want is None:
        with pytest.raises(IdProblem, match="uid"):
            given_id(row, "uid", json_row=True)
    else:
        assert given_id(row, "uid", json_row=True) == want


def test_no_id_and_a_required_one() -> None:
    assert given_id({"messages": []}, "id") is None
    assert given_id({"id": None}, "id") is None  # a column's null: no id
    with pytest.raises(IdProblem, match="id is null"):
        given_id({"id": None}, "id", json_row=True)
    with pytest.raises(IdProblem, match="missing custom_id"):
        given_id({}, "custom_id", required=True)
