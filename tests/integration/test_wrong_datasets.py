"""Never exit 0 over a wrong dataset (issue 29), driven like a user against the simulator over HTTP: an id that
would split an id list, a repaired export over an original that changed since the run, an export of a run with a
damaged or empty committed part."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from tests.conftest import SimProcess, committed_ids, read_rows, regen
from tests.integration.test_repair_run import SIM, _config


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
    done = regen("run", str(_config(tmp_path, data, server.url)), "--only-ids", str(ids), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert committed_ids(tmp_path / "run", "shards") == ["plain"]  # `victim` was never sent
    assert server.stats()["generations_total"] == 1
    (rejected,) = read_rows(tmp_path / "run", "rejects")
    assert rejected["reason"] == "bad_input" and "\n" not in rejected["id"]
    assert f"{data}:1" in rejected["detail"] and "control character" in rejected["detail"]
    assert not any("victim" == i for i in pq.read_table(next((tmp_path / "run/shards").glob("*.parquet")))["id"])
