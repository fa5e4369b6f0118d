"""Audit, regenerate only what is broken, write the dataset back whole (issue 15), against the simulator over HTTP:
`input.select = "invalid"` and `--only-ids` send only the failing rows (the simulator's counts prove it), and
`regen export --format repaired` returns every row in order, the untouched ones as they were, the broken ones
repaired, and a re-audit that finds nothing left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from pipeline import conversation
from pipeline.inputs import conversations
from tests.helpers import assert_exactly_once, wait_until
from tests.helpers.exactly_once import committed_ids
from tests.helpers.paths import ROOT
from tests.helpers.planted_defects import planted_row, write_planted
from tests.helpers.processes import SimProcess, regen
from tests.helpers.repair import SIM, repair_config


def _expected_requests(rows: list, failing: set[str]) -> int:
    n = 0
    for row, _, _ in rows:
        if row.get("id") in failing:
            messages = conversations.parse(row["messages"], "messages")
            n += len(conversation.turn_positions(messages, "all"))
    return n


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_select_invalid_sends_only_broken_rows_and_export_repairs_them(tmp_path: Path, sim, suffix: str) -> None:
    data = tmp_path / f"data{suffix}"
    rows = write_planted(data, 330)
    failing = {r["id"] for r, reason, _ in rows if reason}
    server: SimProcess = sim(*SIM)
    cfg = repair_config(tmp_path, data, server.url, select="invalid")
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    stats = server.stats()
    assert stats["generations_total"] == _expected_requests(rows, failing)
    assert set(committed_ids(tmp_path / "run", "shards")) == failing

    again = regen("run", str(cfg), "--no-progress")  # resume sees the same selection: nothing left to send
    assert again.returncode == 0, again.stderr
    assert server.stats()["generations_total"] == stats["generations_total"]

    out = tmp_path / "repaired"
    exported = regen(
        "export", str(tmp_path / "run"), "--format", "repaired", "--original", str(data), "--out", str(out)
    )
    assert exported.returncode == 0, exported.stderr
    report = json.loads((out / "repair-report.json").read_text())
    assert report["rows"] == 330 and report["repaired"] == len(failing) and report["left"] == 330 - len(failing)
    repaired = _read(out / data.name)
    assert len(repaired) == 330
    for (original, reason, _), new in zip(rows, repaired, strict=True):
        assert list(new) == list(original)  # the same columns in the same order
        if not reason:
            assert new == _read_one(data, original["id"])  # untouched rows: value for value
        else:
            assert new["id"] == original["id"] and new["source"] == original["source"]
    audit = regen("audit", str(out / data.name), "--json")
    assert audit.returncode == 0, audit.stdout
    assert json.loads(audit.stdout)["failing_rows"] == 0
    if suffix == ".jsonl":  # untouched lines are the original bytes
        before = data.read_bytes().splitlines()
        after = (out / data.name).read_bytes().splitlines()
        kept = [i for i, (_, reason, _) in enumerate(rows) if not reason]
        assert [after[i] for i in kept] == [before[i] for i in kept]


def _read(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _read_one(path: Path, row_id: str) -> dict:
    return next(r for r in _read(path) if r["id"] == row_id)


def test_only_ids_sends_only_the_listed_rows(tmp_path: Path, sim) -> None:
    data = tmp_path / "data.jsonl"
    rows = write_planted(data, 44, with_id=False)
    ids = tmp_path / "bad.txt"
    assert regen("audit", str(data), "--ids-out", str(ids)).returncode == 1
    listed = ids.read_text().splitlines()
    assert listed and all(x.startswith("row:") for x in listed)
    server: SimProcess = sim(*SIM)
    done = regen("run", str(repair_config(tmp_path, data, server.url)), "--only-ids", str(ids), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert len(committed_ids(tmp_path / "run", "shards")) == len(listed)
    wanted = {int(x.removeprefix("row:")) for x in listed}
    expected = 0
    for i, (row, _, _) in enumerate(rows):
        if i in wanted:
            expected += len(conversation.turn_positions(conversations.parse(row["messages"], "m"), "all"))
    assert server.stats()["generations_total"] == expected
    out = tmp_path / "repaired"  # rows without ids are matched by their content hash, as the reader made them
    exported = regen("export", str(tmp_path / "run"), "--format", "repaired", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert json.loads((out / "repair-report.json").read_text())["repaired"] == len(listed)
    assert regen("audit", str(out / "data.jsonl")).returncode == 0


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_planted_dataset_is_the_same_file_in_every_process(tmp_path: Path, suffix: str) -> None:
    """The repair tests compare exports with `write_planted`'s rows: the file must hold exactly those rows, and
    another process (another hash seed) must write the same bytes."""
    here = tmp_path / f"here{suffix}"
    rows = write_planted(here, 330)
    if suffix == ".jsonl":  # (Parquet adds the struct keys a message lacks, as nulls)
        assert _read(here) == [r for r, _, _ in rows]
    assert [planted_row(i) for i in range(330)] == rows
    assert len({orjson.dumps(r) for r, _, _ in rows}) == 330  # no two rows alike
    there = tmp_path / f"there{suffix}"
    script = f"import pathlib, tests.test_audit as t; t.write_planted(pathlib.Path({str(there)!r}), 330)"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, env=env)
        assert _read(there) == _read(here)
        if suffix == ".jsonl":
            assert there.read_bytes() == here.read_bytes()


def test_a_sigkill_during_the_repair_run_and_the_export_ends_in_a_complete_output(tmp_path: Path, sim) -> None:
    data = tmp_path / "data.jsonl"
    rows = write_planted(data, 660)
    failing = {r["id"] for r, reason, _ in rows if reason}
    server: SimProcess = sim(*SIM, "--decode-rate", "2000", "--max-running-requests", "8")
    cfg = repair_config(tmp_path, data, server.url, select="invalid")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"], cwd=ROOT)
    # the kill lands mid-run: a part committed, requests running on the server, however fast the machine
    wait_until(
        lambda: committed_ids(tmp_path / "run", "shards") and server.stats()["running"] > 0,
        "a committed part and requests running",
        alive=proc,
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(set(committed_ids(tmp_path / "run", "shards"))) < len(failing), "the kill should land mid-run"
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    good, bad = assert_exactly_once(tmp_path / "run", sorted(failing))
    assert set(good) | set(bad) == failing  # not one clean row was sent, before or after the kill
    out = tmp_path / "repaired"
    args = [sys.executable, "-m", "pipeline", "export", str(tmp_path / "run"), "--format", "repaired"]
    assert _kill_mid_write(args, out), "no kill landed while the export was writing"
    assert regen("export", str(tmp_path / "run"), "--format", "repaired", "--out", str(out)).returncode == 0
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
    assert len(_read(out / "data.jsonl")) == 660
    assert regen("audit", str(out / "data.jsonl")).returncode == 0


def _kill_mid_write(args: list[str], out: Path, tries: int = 5) -> bool:
    """SIGKILL the export once its hidden copy of data.jsonl exists (past start-up, writing); retried when the
    export finished first. Whenever the kill landed, no visible file may be half written. True if one landed."""
    hidden = out / ".data.jsonl.repair.tmp"
    for _ in range(tries):
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.Popen([*args, "--out", str(out)], cwd=ROOT)
        while proc.poll() is None and not hidden.exists():
            pass  # no sleep: the write lasts milliseconds
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode == -signal.SIGKILL and not (out / "repair-report.json").exists():
            visible = out / "data.jsonl"
            assert not visible.exists() or len(_read(visible)) == 660, "a half-written data.jsonl is visible"
            return True
    return False


def test_from_first_bad_turn_generates_only_the_failing_turn_and_those_after_it(tmp_path: Path, sim) -> None:
    def conv(answers: list[str]) -> list[dict]:
        out: list[dict] = []
        for k, answer in enumerate(answers):
            out.append({"role": "user", "content": f"Question {k}?"})
            out.append(
                {"role": "assistant", "content": answer, "reasoning_content": f"Thinking {k}." if answer else ""}
            )
        return out

    rows = [
        {"id": "bad-middle", "messages": conv(["First answer.", "", "Third answer."]), "source": "x"},
        {"id": "clean", "messages": conv(["Fine.", "Also fine."]), "source": "y"},
    ]
    data = tmp_path / "data.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    server: SimProcess = sim(*SIM)
    cfg = repair_config(tmp_path, data, server.url, select="invalid", repair="from_first_bad_turn")
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert server.stats()["generations_total"] == 2  # turns 2 and 3 of the one failing row, not turn 1
    shard = pq.read_table(tmp_path / "run" / "shards").to_pylist()
    assert [r["id"] for r in shard] == ["bad-middle"] and len(shard[0]["turns"]) == 2

    out = tmp_path / "repaired"
    exported = regen("export", str(tmp_path / "run"), "--format", "repaired", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    before, clean_line = data.read_bytes().splitlines()
    after = (out / "data.jsonl").read_bytes().splitlines()
    assert after[1] == clean_line
    new = orjson.loads(after[0])["messages"]
    assert orjson.dumps(new[:3]) == orjson.dumps(rows[0]["messages"][:3])  # turn 1 (and its question) as given
    assert [m["content"] for m in new[3::2]] == [t["answer"] for t in shard[0]["turns"]]
    assert regen("audit", str(out / "data.jsonl")).returncode == 0


def _chat(question: str, answer: str, reasoning: str = "") -> list[dict[str, str]]:
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer, "reasoning_content": reasoning},
    ]


def test_every_copy_of_a_repeated_conversation_gets_the_regenerated_turns(tmp_path: Path, sim) -> None:
    broken = [{"messages": _chat(f"Question {i}?", "")} for i in range(6)]  # no ids: a content hash each
    rows = [
        *broken,
        {"messages": _chat("Fine?", "Yes.", "I think so."), "n": 1},  # passes the audit: untouched
        *broken[:3],  # exact copies: the same conversations
        {"id": "x", "messages": _chat("What is 2 + 2?", "")},
        {"id": "x", "messages": _chat("Another question under the same id?", "")},  # another conversation
        {"id": "y", "messages": _chat("Same id, same question?", ""), "tag": "first"},
        {"id": "y", "messages": _chat("Same id, same question?", ""), "tag": "second"},  # the same conversation
    ]
    data = tmp_path / "data.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    server: SimProcess = sim(*SIM)
    cfg = repair_config(tmp_path, data, server.url, select="invalid")
    cfg.write_text(cfg.read_text().replace("[output]", "dedupe = true\n[output]"))
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert len(committed_ids(tmp_path / "run", "shards")) == 8  # 6 + x + y: each conversation answered once
    out = tmp_path / "repaired"
    exported = regen("export", str(tmp_path / "run"), "--format", "repaired", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert "4 of the regenerated rows repeat an earlier row (input.dedupe): each copy as the first" in exported.stdout
    report = json.loads((out / "repair-report.json").read_text())
    assert (report["repaired"], report["repeats"], report["duplicate"], report["left"]) == (12, 4, 1, 1)
    before, after = data.read_bytes().splitlines(), (out / data.name).read_bytes().splitlines()
    new = [orjson.loads(line) for line in after]
    assert after[6] == before[6] and after[11] == before[11]  # passing row, and x's other conversation: the bytes
    assert [after[i] for i in (7, 8, 9)] == [after[i] for i in (0, 1, 2)] != [before[i] for i in (0, 1, 2)]
    assert new[13]["messages"][1] == new[12]["messages"][1] and new[13]["tag"] == "second"  # y: each its own row
    assert new[12]["messages"][1]["reasoning_content"]
    listed = [orjson.loads(line) for line in (out / "repair-rows.jsonl").read_bytes().splitlines()]
    assert [(e["id"], e["reason"]) for e in listed] == [("x", "duplicate_id")]
    audit = json.loads(regen("audit", str(out / data.name), "--json").stdout)
    assert audit["failing_rows"] == 1  # only x's other conversation, which the run never saw
    assert "repeats of an earlier row (the same conversation: the same fate) | 4" in (out / "README.md").read_text()
