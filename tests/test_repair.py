"""The repaired export (dataset/repair.py) on hand-made run directories: which row gets what, where the reasoning
goes, rejected rows kept or dropped and listed, ids by content hash, the output written atomically."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.config import Config, EndpointConfig, ExportConfig, InputConfig
from pipeline.dataset import generated
from pipeline.dataset.generated import AcceptedRows, accepted_rows
from pipeline.dataset.repair import ROWS, RepairOptions, export_repaired
from pipeline.errors import ConfigError, RegenError
from pipeline.inputs.ids import content_id
from tests.helpers.repair import ACCEPTED, Q, original_rows, repair_run

SHORT = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]


def _written(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        return orjson.loads(path.read_bytes())
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_each_row_gets_its_fate_and_reasoning_where_the_original_keeps_it(tmp_path: Path, suffix: str) -> None:
    original = tmp_path / "in" / f"data{suffix}"
    original.parent.mkdir()
    rows = original_rows()
    if suffix == ".json":
        original.write_bytes(orjson.dumps(rows))
    else:
        original.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    report = export_repaired(repair_run(tmp_path, original, ACCEPTED, ["again"]), tmp_path / "out", RepairOptions())
    out = {r["id"]: r for r in _written(tmp_path / "out" / original.name)}
    assert list(out) == [r["id"] for r in rows]
    assert out["clean"] == rows[0] and out["again"] == rows[3] and out["pending"] == rows[6]
    fixed = {"role": "assistant", "content": "new answer", "reasoning_content": "new reasoning", "x": 1}
    assert out["field"]["messages"][1] == fixed  # the message's other keys kept
    assert out["inline"]["messages"][1]["content"] == "<think>\nthought\n</think>\n\ndone"
    new_turn = {"role": "assistant", "content": "because", "reasoning_content": "why"}  # as the file's first row
    assert out["missing"]["messages"][1] == new_turn
    assert out["sharegpt"]["conversations"][1] == {"from": "gpt", "value": "A.", "reasoning_content": "hmm"}
    assert (report["rows"], report["repaired"], report["rejected_kept"], report["left"]) == (7, 4, 1, 2)
    listed = [orjson.loads(line) for line in (tmp_path / "out" / ROWS).read_bytes().splitlines()]
    assert [(x["id"], x["reason"]) for x in listed] == [("again", "empty_answer"), ("pending", "empty_response")]
    assert report["by_reason"]["empty_response"] == {"repaired": 3, "rejected_kept": 1, "left": 1}


def test_drop_leaves_rejected_rows_out_and_lists_them(tmp_path: Path) -> None:
    original = tmp_path / "data.jsonl"
    original.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in original_rows()))
    run = repair_run(tmp_path, original, ACCEPTED, ["again"])
    report = export_repaired(run, tmp_path / "out", RepairOptions(original=str(original), on_reject="drop"))
    assert "again" not in {r["id"] for r in _written(tmp_path / "out" / "data.jsonl")}
    assert report["dropped"] == 1 and b'"again"' in (tmp_path / "out" / ROWS).read_bytes()


def test_parquet_uses_the_message_structs_reasoning_field(tmp_path: Path) -> None:
    original = tmp_path / "data.parquet"
    rows = [r for r in original_rows() if "messages" in r and r["id"] != "missing"]
    table = pa.Table.from_pylist([{**r, "score": float(i)} for i, r in enumerate(rows)])
    pq.write_table(table, original)
    export_repaired(repair_run(tmp_path, original, ACCEPTED, ["again"]), tmp_path / "out", RepairOptions())
    out = pq.read_table(tmp_path / "out" / "data.parquet")
    assert out.schema == table.schema
    got = {r["id"]: r for r in out.to_pylist()}
    want = {r["id"]: r for r in table.to_pylist()}
    assert got["clean"] == want["clean"] and got["again"] == want["again"]
    assert got["inline"]["messages"][1]["content"] == "<think>\nthought\n</think>\n\ndone"  # its own style
    assert got["field"]["messages"][1]["reasoning_content"] == "new reasoning"


def test_rows_without_ids_match_by_the_readers_content_hash(tmp_path: Path) -> None:
    original = tmp_path / "data.jsonl"
    rows = [{"messages": [Q, {"role": "assistant", "content": ""}]}, {"messages": SHORT}]
    original.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    hashed = content_id([{"role": "system", "content": "Be brief."}, Q, {"role": "assistant", "content": ""}])
    run = repair_run(tmp_path, original, {hashed: [("r", "fixed")]}, [], system_prompt="Be brief.")
    report = export_repaired(run, tmp_path / "out", RepairOptions())
    out = _written(tmp_path / "out" / "data.jsonl")
    assert out[0]["messages"][1]["content"] == "<think>\nr\n</think>\n\nfixed" and out[1] == rows[1]
    assert report["repaired"] == 1


def test_copies_of_a_rejected_conversation_share_its_fate_and_an_unchecked_repeated_id_is_kept(tmp_path: Path) -> None:
    """A run without recorded fingerprints (older than the check): a content-hash id is the conversation itself, so
    its copies share the first's fate (here rejected again and dropped); a repeated given id cannot be checked, so
    its second row is kept as it is."""
    original = tmp_path / "data.jsonl"
    unanswered = {"messages": [Q, {"role": "assistant", "content": ""}]}
    rows = [unanswered, {"id": "again", "messages": SHORT}, unanswered, {"id": "again", "messages": [Q]},
            {"id": "missing", "messages": [Q]}]  # fmt: skip
    original.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    hashed = content_id([Q, {"role": "assistant", "content": ""}])
    run = repair_run(tmp_path, original, {"missing": [("why", "because")]}, [hashed, "again"])
    report = export_repaired(run, tmp_path / "out", RepairOptions(on_reject="drop"))
    assert [r.get("id") for r in _written(tmp_path / "out" / "data.jsonl")] == ["again", "missing"]
    assert _written(tmp_path / "out" / "data.jsonl")[0] == rows[3]
    assert (report["dropped"], report["repeats"], report["duplicate"], report["repaired"]) == (3, 1, 1, 1)


def test_a_failed_export_leaves_the_previous_output_and_a_rerun_completes(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in original_rows()))
    run = repair_run(tmp_path, folder, ACCEPTED, [])
    out = tmp_path / "out"
    export_repaired(run, out, RepairOptions())
    before = (out / "a.jsonl").read_bytes()
    (folder / "b.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in original_rows()[:2]))
    (folder / "c.jsonl.gz").write_bytes(b"not gzip")  # fails after a.jsonl and b.jsonl were written hidden
    with pytest.raises(RegenError, match="c.jsonl.gz"):
        export_repaired(run, out, RepairOptions(original=f"{folder}/*.jsonl*"))
    assert (out / "a.jsonl").read_bytes() == before and not (out / "b.jsonl").exists()
    (folder / "c.jsonl.gz").unlink()
    report = export_repaired(run, out, RepairOptions())
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["a.jsonl", "b.jsonl", ROWS, "repair-report.json", "README.md"]
    )
    assert report["files"] == ["a.jsonl", "b.jsonl"]


def test_the_output_never_overwrites_the_original(tmp_path: Path) -> None:
    original = tmp_path / "data.jsonl"
    original.write_bytes(orjson.dumps(original_rows()[0]) + b"\n")
    run = repair_run(tmp_path, original, {}, [])
    with pytest.raises(ConfigError, match="holds original files"):
        export_repaired(run, tmp_path, RepairOptions())
    with pytest.raises(ConfigError, match="inside the run directory"):
        export_repaired(run, run / "x", RepairOptions())
    samples = dataclasses.replace(Config(), generation=dataclasses.replace(Config().generation, samples=2))
    (run / "run.json").write_bytes(orjson.dumps({"config": samples.to_dict()}))
    with pytest.raises(ConfigError, match="samples"):
        export_repaired(run, tmp_path / "out", RepairOptions())


def test_the_card_counts_each_fate_by_reason_and_names_no_endpoint(tmp_path: Path) -> None:
    original = tmp_path / "data.jsonl"
    original.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in original_rows()))
    run = repair_run(tmp_path, original, ACCEPTED, ["again"])
    cfg = Config(
        input=InputConfig(path=str(original)),
        endpoints=(EndpointConfig(url="http://gpu-node-7.internal:30000"),),
        export=ExportConfig(license="apache-2.0", language=("en",)),
    )
    (run / "run.json").write_bytes(orjson.dumps({"config": cfg.to_dict()}))
    export_repaired(run, tmp_path / "out", RepairOptions(on_reject="drop"))
    card = (tmp_path / "out" / "README.md").read_text()
    head = yaml.safe_load(card.split("---\n")[1])
    assert head["license"] == "apache-2.0" and head["language"] == ["en"]
    assert head["configs"][0]["data_files"][0]["path"] == ["data.jsonl"]
    assert "gpu-node-7" not in card and "30000" not in card
    lines = ["| rows audited | 7 |", "| failing the audit | 6 |", "| regenerated | 5 |", "| left as it was | 2 |",
             "| repaired (new turns) | 4 |", "| regenerated, rejected again, left out | 1 |",
             "| `empty_response` | 5 | 4 | 3 | 0 | 1 | 0 | 0 | 0 | 1 |", "| `ok` | 1 | 0 |"]  # fmt: skip
    assert all(line in card for line in lines), card
    assert not list((tmp_path / "out").glob(".*"))  # written hidden, renamed with the rest


def test_from_first_bad_turn_puts_the_new_turns_after_the_kept_ones(tmp_path: Path) -> None:
    def turn(answer: str) -> dict[str, Any]:
        return {"role": "assistant", "content": answer, "reasoning_content": "r" if answer else ""}

    messages = [Q, turn("one"), Q, turn(""), Q, turn("three"), Q]  # turn 2 empty, the last answer missing
    original = tmp_path / "data.jsonl"
    original.write_bytes(orjson.dumps({"id": "row", "messages": messages}) + b"\n")
    new = [("r2", "two"), ("r3", "three again"), ("r4", "four")]
    run = repair_run(tmp_path, original, {"row": new}, [], repair="from_first_bad_turn")
    report = export_repaired(run, tmp_path / "out", RepairOptions())
    out = _written(tmp_path / "out" / "data.jsonl")[0]["messages"]
    assert report["repaired"] == 1 and out[:3] == messages[:3]
    assert [(m.get("reasoning_content"), m["content"]) for m in out[3::2]] == new
    assert len(out) == 8


def test_the_runs_turns_are_read_on_demand_one_row_group_at_a_time(tmp_path: Path) -> None:
    """Issue 40: the repaired export no longer holds every accepted turn. The index knows each id's place from the
    id column alone; walked in the run's order, each row group is read once, and what is read equals the rows."""
    import pyarrow.parquet as pq

    from pipeline.schema import shard_schema, to_table
    from pipeline.store import synthetic

    shards = tmp_path / "shards"
    shards.mkdir()
    ids = [f"r{i:05d}" for i in range(3000)]
    for part in range(3):  # 3 parts of 1,000 rows in row groups of 100
        rows = [synthetic.accepted(i, 64) for i in ids[part * 1000 : (part + 1) * 1000]]
        pq.write_table(to_table(rows, shard_schema()), shards / f"part-{part}.parquet", row_group_size=100)
    pq.write_table(to_table([synthetic.accepted("r00005", 64)], shard_schema()), shards / "part-9.parquet")  # a copy
    accepted = accepted_rows(tmp_path)
    assert len(accepted) == 3000 and set(accepted.keys()) == set(ids) and "nope" not in accepted
    for row_id in ids:
        generated = accepted[row_id]
        assert generated.turns == [("x" * 56, f"answer {row_id}")]  # the row's own turn, first copy of an id
    assert accepted.group_reads == 30  # each of the 30 row groups read once
    assert accepted._cached <= accepted.CACHED_ROWS


def _parts(tmp_path: Path, *parts: list[tuple[str, str]]) -> list[Path]:
    paths = []
    for n, rows in enumerate(parts):
        path = tmp_path / f"part-{n}.parquet"
        turns = [[{"reasoning": "r", "answer": answer}] for _, answer in rows]
        pq.write_table(pa.table({"id": [i for i, _ in rows], "turns": turns}), path, row_group_size=2)
        paths.append(path)
    return paths


def test_the_index_of_accepted_ids_keeps_the_first_copy_and_each_id_once(tmp_path: Path) -> None:
    """A copy committed twice (before a resume settles it): the first part's row is the one pasted."""
    paths = _parts(tmp_path, [("a", "first a"), ("b", "b"), ("c", "c")], [("a", "second a"), ("d", "d")])
    accepted = AcceptedRows(paths)
    assert accepted["a"].turns == [("r", "first a")] and accepted["d"].turns == [("r", "d")]
    assert list(accepted) == ["a", "b", "c", "d"] and len(accepted) == 4
    assert "e" not in accepted and None not in accepted


def test_ids_sharing_a_hash_are_told_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index keeps hashes, not ids: two committed ids with one hash are each found, and an id the run never
    committed is not taken for a committed one that shares its hash."""

    def one_hash(row_id: str) -> int:
        return 7 if row_id in ("a", "b", "never") else real(row_id)

    real = generated.id_hash
    monkeypatch.setattr(generated, "id_hash", one_hash)
    monkeypatch.setattr(generated, "id_hashes", lambda ids: np.array([one_hash(i) for i in ids], dtype=np.uint64))
    accepted = AcceptedRows(_parts(tmp_path, [("a", "A"), ("x", "X")], [("b", "B"), ("a", "A again")]))
    assert (accepted["a"].turns, accepted["b"].turns, accepted["x"].turns) == ([("r", "A")], [("r", "B")], [("r", "X")])
    assert "never" not in accepted and sorted(accepted) == ["a", "b", "x"] and len(accepted) == 3
    (tmp_path / "lone").mkdir()
    lone = AcceptedRows(_parts(tmp_path / "lone", [("a", "A")]))
    assert "a" in lone and "never" not in lone and "b" not in lone  # one row of the hash: checked by its id
