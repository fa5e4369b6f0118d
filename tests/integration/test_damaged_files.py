"""Damaged and foreign files among the committed parts, and ids committed twice (issue 20, problems 1 and 5):
every command names the file, keeps working on the rest, and `regen run` gets back to exactly once."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_config, write_prompts
from tests.helpers.exactly_once import committed_ids
from tests.helpers.processes import SimProcess, regen

Sim = Callable[..., SimProcess]


def _finished_run(tmp_path: Path, sim: Sim) -> tuple[Path, Path, list[str], SimProcess]:
    server = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=120)
    cfg = write_config(tmp_path, server.url)
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    return cfg, tmp_path / "run", ids, server


def _json(*args: str) -> dict:
    out = regen(*args, "--json")
    return dict(orjson.loads(out.stdout))


def test_a_truncated_shard_is_reported_then_set_aside_and_regenerated(tmp_path: Path, sim: Sim) -> None:
    cfg, run, ids, server = _finished_run(tmp_path, sim)
    victim = sorted((run / "shards").glob("*.parquet"))[0]
    lost = set(pq.read_table(victim, columns=["id"]).column("id").to_pylist())
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])

    status = regen("status", str(run))
    assert status.returncode == 0 and victim.name in status.stdout and "DAMAGED" in status.stdout, status.stderr
    assert _json("status", str(run))["accepted"] + _json("status", str(run))["rejected"] == len(ids) - len(lost)
    validate = regen("validate", str(run))
    assert validate.returncode == 1 and victim.name in validate.stdout
    assert [victim.name in d for d in _json("inspect", str(run))["damaged"]] == [True]
    exported = regen("export", str(run), "--format", "chat", "--out", str(tmp_path / "out"))
    assert exported.returncode == 2 and victim.name in exported.stderr  # never a partial export unasked (issue 29)

    before = server.stats()["generations_total"]
    rerun = regen("run", str(cfg), "--no-progress")
    assert rerun.returncode == 0, rerun.stderr
    assert victim.name in rerun.stderr and "damaged" in rerun.stderr
    assert_exactly_once(run, ids)
    assert server.stats()["generations_total"] - before >= len(lost)  # the lost ids were generated again
    assert [p.name for p in (run / "damaged").iterdir()] == [f"shards-{victim.name}"]
    moves = orjson.loads((run / "run.json").read_bytes())["set_aside"]
    assert [(m["from"], m["to"]) for m in moves] == [(f"shards/{victim.name}", f"damaged/shards-{victim.name}")]
    assert "truncated" in moves[0]["problem"]
    assert regen("validate", str(run)).returncode == 0


def test_a_foreign_file_stops_the_run_until_the_user_allows_moving_it(tmp_path: Path, sim: Sim) -> None:
    cfg, run, ids, _ = _finished_run(tmp_path, sim)
    (run / "shards" / "notes.parquet").write_text("not parquet at all\n")
    pq.write_table(pa.table({"x": [1, 2]}), run / "rejects" / "other.parquet")

    refused = regen("run", str(cfg), "--no-progress")
    assert refused.returncode == 2
    assert "notes.parquet: not a Parquet file" in refused.stderr and "other.parquet" in refused.stderr
    assert "--move-foreign" in refused.stderr and "Traceback" not in refused.stderr
    assert (run / "shards" / "notes.parquet").exists()  # nothing moved without asking
    status = regen("status", str(run))
    assert status.returncode == 0 and "notes.parquet" in status.stdout

    moved = regen("run", str(cfg), "--no-progress", "--move-foreign")
    assert moved.returncode == 0, moved.stderr
    assert sorted(p.name for p in (run / "damaged").iterdir()) == ["rejects-other.parquet", "shards-notes.parquet"]
    assert_exactly_once(run, ids)


def test_an_id_in_two_committed_files_is_reported_and_never_exported_twice(tmp_path: Path, sim: Sim) -> None:
    cfg, run, ids, _ = _finished_run(tmp_path, sim)
    shard = sorted((run / "shards").glob("*.parquet"))[0]
    copy = run / "shards" / "copy.parquet"
    shutil.copy(shard, copy)
    copied = pq.read_table(copy, columns=["id"]).column("id").to_pylist()

    status = _json("status", str(run))
    assert status["duplicates"]["count"] == len(copied)
    assert sorted(status["duplicates"]["examples"][0]["files"]) == sorted(
        [f"shards/{shard.name}", "shards/copy.parquet"]
    )
    validate = regen("validate", str(run))
    assert validate.returncode == 1 and "DUPLICATES" in validate.stdout and "copy.parquet" in validate.stdout
    out = tmp_path / "out"
    assert regen("export", str(run), "--format", "chat", "--out", str(out)).returncode == 0
    exported = [i for p in sorted((out / "data").glob("*.parquet")) for i in pq.read_table(p).column("id").to_pylist()]
    assert len(exported) == len(set(exported)) == len(committed_ids(run, "shards")) - len(copied)

    assert regen("run", str(cfg), "--no-progress").returncode == 0  # a resume settles the copy
    assert_exactly_once(run, ids)
    assert _json("status", str(run))["duplicates"]["count"] == 0
