"""Never exit 0 over a wrong dataset (issue 29), driven like a user against the simulator over HTTP: an id that
would split an id list, a repaired export over an original that changed since the run, an export of a run with a
damaged or empty committed part."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.exactly_once import committed_ids, read_rows
from tests.helpers.processes import SimProcess, regen
from tests.helpers.repair import SIM, repair_config


def _empty_answer(row_id: str, question: str) -> dict:
    return {"id": row_id, "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]}


def _good(row_id: str, question: str) -> dict:
    answer = {"role": "assistant", "content": "Fine.", "reasoning_content": "Let me think."}
    return {"id": row_id, "messages": [{"role": "user", "content": question}, answer]}


def test_an_id_with_a_newline_is_bad_input_and_cannot_split_the_id_list(tmp_path: Path, sim) -> None:
    data = tmp_path / "data.jsonl"
    rows = [_empty_answer("evil\nvictim", "Broken?"), _good("victim", "Good?"), _empty_answer("plain", "Also?")]
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    ids = tmp_path / "ids.txt"
    audit = regen("audit", str(data), "--ids-out", str(ids), "--json")
    assert audit.returncode == 1
    listed = ids.read_text().splitlines()
    assert listed == ["row:0", "plain"]  # the broken row by number; never `victim`, the good row
    report = json.loads(audit.stdout)
    assert report["by_reason"]["bad_input"] == 1
    assert "control character" in report["examples"]["bad_input"][0]["detail"]

    server: SimProcess = sim(*SIM)
    done = regen("run", str(repair_config(tmp_path, data, server.url)), "--only-ids", str(ids), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert committed_ids(tmp_path / "run", "shards") == ["plain"]  # `victim` was never sent
    assert server.stats()["generations_total"] == 1
    (rejected,) = read_rows(tmp_path / "run", "rejects")
    assert rejected["reason"] == "bad_input" and "\n" not in rejected["id"]
    assert f"{data}:1" in rejected["detail"] and "control character" in rejected["detail"]
    assert not any("victim" == i for i in pq.read_table(next((tmp_path / "run/shards").glob("*.parquet")))["id"])


def _write(path: Path, rows: list[dict]) -> None:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".json":
        path.write_bytes(orjson.dumps(rows))
    else:
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def _read(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        return orjson.loads(path.read_bytes())
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _repair_run(tmp_path: Path, sim, data: Path, rows: list[dict]) -> Path:
    _write(data, rows)
    server: SimProcess = sim(*SIM)
    done = regen("run", str(repair_config(tmp_path, data, server.url, select="invalid")), "--no-progress")
    assert done.returncode == 0, done.stderr
    return tmp_path / "run"


def _export(run: Path, original: Path, out: Path) -> tuple[dict, dict[str, dict], str]:
    done = regen("export", str(run), "--format", "repaired", "--original", str(original), "--out", str(out))
    assert done.returncode == 0, done.stderr
    listed = [orjson.loads(line) for line in (out / "repair-rows.jsonl").read_bytes().splitlines()]
    return json.loads((out / "repair-report.json").read_text()), {e["id"]: e for e in listed}, done.stdout


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".json"])
def test_repaired_export_pastes_only_where_the_row_still_asks_what_was_answered(
    tmp_path: Path, sim, suffix: str
) -> None:
    rows = [_empty_answer(f"r{i}", f"Question {i}?") for i in range(10)] + [_good("ok", "Fine?")]
    data = tmp_path / f"data{suffix}"
    run = _repair_run(tmp_path, sim, data, rows)
    assert sorted(committed_ids(run, "shards")) == sorted(f"r{i}" for i in range(10))

    edited = [dict(r) for r in rows]
    edited[1] = _empty_answer("r1", "Question 1, edited after the run?")  # the question changed
    edited[2] = _good("r2", "Question 2?")  # fixed by hand after the run
    del edited[3]  # deleted from the original
    edited.insert(5, _empty_answer("r4", "Question 4?"))  # r4 twice, the same conversation: both repaired
    edited.insert(7, _empty_answer("r6", "Another question under r6's id?"))  # r6 twice, another conversation
    original = tmp_path / "edited" / f"data{suffix}"
    original.parent.mkdir()
    _write(original, edited)
    out = tmp_path / "repaired"
    report, listed, stdout = _export(run, original, out)

    assert report["rows"] == 12 and report["repaired"] == 8 and report["repeats"] == 1
    assert (report["changed"], report["passes_now"], report["duplicate"], report["unplaced"]) == (1, 1, 1, 1)
    assert listed["r1"]["reason"] == "conversation_changed"
    assert listed["r2"]["reason"] == "passes_now"
    assert listed["r3"]["reason"] == "no_row"
    assert listed["r6"]["reason"] == "duplicate_id" and "r4" not in listed
    assert "8 repaired" in stdout and "1 changed since the run" in stdout
    assert "1 repeated ids with another conversation" in stdout
    written = _read(out / original.name)
    assert [r["id"] for r in written] == [r["id"] for r in edited]
    assert written[1] == _read(original)[1] and written[2] == _read(original)[2]  # kept exactly as they are
    assert written[7] == _read(original)[7]  # the second r6, another conversation: kept as it is
    assert written[5] == written[3] and written[3]["messages"][-1]["content"]  # both r4: repaired alike
    assert all(written[i]["messages"][-1]["content"] for i in (0, 3, 4, 5, 6, 8, 9, 10))


def test_repaired_export_over_another_dataset_with_the_same_ids_pastes_nothing(tmp_path: Path, sim) -> None:
    rows = [_empty_answer(f"r{i}", f"Question {i}?") for i in range(10)]
    run = _repair_run(tmp_path, sim, tmp_path / "data.jsonl", rows)
    other = tmp_path / "other" / "data.jsonl"
    other.parent.mkdir()
    _write(other, [_empty_answer(f"r{i}", f"Another dataset's question {i}?") for i in range(10)])
    report, listed, _ = _export(run, other, tmp_path / "repaired")
    assert report["repaired"] == 0 and report["changed"] == 10
    assert {e["reason"] for e in listed.values()} == {"conversation_changed"}
    assert (tmp_path / "repaired" / "data.jsonl").read_bytes() == other.read_bytes()


def test_export_refuses_a_run_with_damaged_or_empty_parts_unless_asked_for_a_partial_export(
    tmp_path: Path, sim
) -> None:
    server: SimProcess = sim(*SIM)
    data = tmp_path / "data.jsonl"
    _write(data, [_empty_answer(f"r{i:03d}", f"Question {i}?") for i in range(120)])
    cfg = repair_config(tmp_path, data, server.url)
    assert regen("run", str(cfg), "--no-progress").returncode == 0
    run = tmp_path / "run"
    first, second = sorted((run / "shards").glob("*.parquet"))[:2]
    lost = pq.read_table(first, columns=["id"]).column("id").to_pylist()
    first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])
    second.write_bytes(b"")

    refused = regen("export", str(run), "--format", "chat", "--out", str(tmp_path / "out"))
    assert refused.returncode == 2
    assert first.name in refused.stderr and second.name in refused.stderr and "--partial" in refused.stderr
    assert "truncated" in refused.stderr and not (tmp_path / "out").exists()
    repaired = regen("export", str(run), "--format", "repaired", "--out", str(tmp_path / "rep"))
    assert repaired.returncode == 2 and first.name in repaired.stderr

    partial = regen("export", str(run), "--format", "chat", "--out", str(tmp_path / "out"), "--partial")
    assert partial.returncode == 0, partial.stderr
    assert first.name in partial.stderr and "partial export" in partial.stderr
    card = (tmp_path / "out" / "README.md").read_text()
    assert "Incomplete" in card and first.name in card and second.name in card
    exported = pq.read_table(tmp_path / "out" / "data").column("id").to_pylist()
    assert not set(lost) & set(exported)

    status = regen("status", str(run))
    assert second.name in status.stdout and "sets it aside" in status.stdout
    rerun = regen("run", str(cfg), "--no-progress")  # the advice holds: both set aside, their ids regenerated
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in (run / "damaged").iterdir()) == [f"shards-{first.name}", f"shards-{second.name}"]
    whole = regen("export", str(run), "--format", "chat", "--out", str(tmp_path / "out"))
    assert whole.returncode == 0, whole.stderr
    assert len(pq.read_table(tmp_path / "out" / "data").column("id")) == 120
