"""Every flag of the RUN_DIR and dataset commands, passed once through the CLI (`pipeline.cli.main` with argv, as
`regen` runs it), with an assertion that only that flag's effect satisfies: a flag parsed but not handed on (or
handed to the wrong parameter) fails here, while the library functions' own tests would still pass.

The run directories are the hand-built ones of tests/helpers/inspection_runs.py (known shards, endpoints and planted
defects) and tests/helpers/repair.py; preflight talks to a real simulator over HTTP."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from tests.helpers import SIM_FLAGS
from tests.helpers.inspection_runs import B, build_run, row, write
from tests.helpers.planted_defects import write_planted
from tests.helpers.processes import SimProcess
from tests.helpers.repair import ACCEPTED, original_rows, repair_run

Capture = pytest.CaptureFixture[str]


def regen_main(capsys: Capture, *argv: str) -> tuple[int, str]:
    """`regen ARGV...` in this process: (exit code, stdout)."""
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def regen_json(capsys: Capture, *argv: str) -> tuple[int, Any]:
    code, out = regen_main(capsys, *argv, "--json")
    return code, json.loads(out)


def ids_in(folder: Path) -> list[str]:
    return [i for p in sorted(folder.glob("*.parquet")) for i in pq.read_table(p, columns=["id"])["id"].to_pylist()]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return build_run(tmp_path)


# -- inspect ---------------------------------------------------------------------------------------------------


def test_inspect_shard_keeps_one_file(run: Path, capsys: Capture) -> None:
    code, report = regen_json(capsys, "inspect", str(run), "--shard", "w0-0001.parquet", "--sample", "50")
    assert code == 0 and report["rows"] == 50
    assert {s["file"] for s in report["sample"]} == {"shards/w0-0001.parquet"}
    assert {s["id"] for s in report["sample"]} == {f"p{i:05d}" for i in range(50, 100)}


def test_inspect_reason_samples_those_rejects(run: Path, capsys: Capture) -> None:
    code, report = regen_json(capsys, "inspect", str(run), "--reason", "truncated", "--sample", "10")
    assert code == 0
    assert sorted(s["id"] for s in report["sample"]) == [f"p{i:05d}" for i in range(1100, 1105)]


def test_inspect_where_filters_by_a_column(run: Path, capsys: Capture) -> None:
    code, report = regen_json(capsys, "inspect", str(run), "--where", "completion_tokens > 345", "--sample", "100")
    assert code == 0 and report["rows"] == 16  # i % 50 in 46..49, in 4 shards
    assert all(s["completion_tokens"] > 345 for s in report["sample"]) and len(report["sample"]) == 16


def test_inspect_endpoint_keeps_its_rows(run: Path, capsys: Capture) -> None:
    expected = sum(pq.read_table(p)["endpoint"].to_pylist().count(B) for p in (run / "shards").glob("*.parquet"))
    code, report = regen_json(capsys, "inspect", str(run), "--endpoint", B, "--sample", "100")
    assert code == 0 and report["accepted"] == expected < 200
    assert {s["endpoint"] for s in report["sample"]} == {B}


def test_inspect_sample_and_seed_choose_the_sample(run: Path, capsys: Capture) -> None:
    picks: dict[str, list[list[str]]] = {}
    for seed in ("1", "2", "1"):
        code, report = regen_json(capsys, "inspect", str(run), "--sample", "7", "--seed", seed)
        assert code == 0 and len(report["sample"]) == 7 and report["sample_seed"] == int(seed)
        picks.setdefault(seed, []).append([s["id"] for s in report["sample"]])
    assert picks["1"][0] == picks["1"][1] != picks["2"][0]


def test_inspect_html_writes_the_report(run: Path, tmp_path: Path, capsys: Capture) -> None:
    page = tmp_path / "report.html"
    code, out = regen_main(capsys, "inspect", str(run), "--html", str(page))
    assert code == 0 and out.startswith(f"wrote {page}") and page.read_text().lstrip().lower().startswith("<!doctype")


# -- validate --------------------------------------------------------------------------------------------------


def test_validate_set_and_quarantine(run: Path, capsys: Capture) -> None:
    code, report = regen_json(capsys, "validate", str(run))
    assert code == 1 and report["failed_by_reason"] == {"answer_in_reasoning": 20, "looping": 10}
    code, report = regen_json(capsys, "validate", str(run), "--set", 'reject_looping="off"')
    assert code == 1 and report["failed_by_reason"] == {"answer_in_reasoning": 20}
    shards, rejects = Counter(ids_in(run / "shards")), Counter(ids_in(run / "rejects"))
    code, report = regen_json(capsys, "validate", str(run), "--quarantine")
    assert code == 0 and report["quarantined"] == 30
    moved = set(shards) - set(ids_in(run / "shards"))
    assert len(moved) == 30 and moved <= set(ids_in(run / "rejects")) - set(rejects)


# -- export ----------------------------------------------------------------------------------------------------


def _lines(folder: Path) -> dict[str, list[dict]]:
    return {p.name: [orjson.loads(x) for x in p.read_bytes().splitlines()] for p in sorted(folder.rglob("*.jsonl"))}


def test_export_file_layout_flags(run: Path, tmp_path: Path, capsys: Capture) -> None:
    out = tmp_path / "chat"
    argv = ["export", str(run), "--format", "chat", "--out", str(out), "--file-format", "jsonl"]
    code, said = regen_main(capsys, *argv, "--rows-per-file", "30", "--license", "mit", "--language", "fr")
    assert code == 0, said
    files = _lines(out / "data")
    assert not list((out / "data").rglob("*.parquet"))  # --file-format jsonl
    assert [len(rows) for rows in files.values()] == [30] * 6 + [20]  # --rows-per-file 30 over 200 rows
    card = (out / "README.md").read_text()
    front = card.split("---")[1]  # the YAML header (the card hides the host names a, b, c even in words)
    assert "mit" in front and "- fr" in front


def test_export_reasoning_flags(run: Path, tmp_path: Path, capsys: Capture) -> None:
    out = tmp_path / "inline"
    argv = ["export", str(run), "--format", "chat", "--out", str(out), "--file-format", "jsonl"]
    code, said = regen_main(
        capsys, *argv, "--reasoning", "inline", "--think-open", "<T>", "--think-close", "</T>", "--include-rejects"
    )
    assert code == 0, said
    files = _lines(out)
    rows = [r for name, rs in files.items() for r in rs if "reject" not in name]
    last = [r["messages"][-1] for r in rows]
    assert len(rows) == 200 and all(m["content"].startswith("<T>") and "</T>" in m["content"] for m in last)
    assert all("reasoning_content" not in m for m in last)
    rejected = [r for name, rs in files.items() for r in rs if "reject" in name]  # --include-rejects
    assert len(rejected) == 30


def test_export_expand_turns(run: Path, tmp_path: Path, capsys: Capture) -> None:
    rng = random.Random(3)
    two_turns = []  # shard 0 rewritten as two-turn conversations
    for i in range(50):
        first, last = row(i, rng), row(i, rng)
        turns = [
            {k: r[k] for k in ("reasoning", "answer", "finish_reason", "prompt_tokens", "completion_tokens")}
            for r in (first, last)
        ]
        history = [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": first["answer"]}]
        two_turns.append({**last, "messages": [*history, {"role": "user", "content": f"again {i}?"}], "turns": turns})
    write(run / "shards" / "w0-0000.parquet", two_turns)
    argv = ["export", str(run), "--format", "chat", "--file-format", "jsonl", "--out"]
    code, said = regen_main(capsys, *argv, str(tmp_path / "whole"))
    assert code == 0 and sum(map(len, _lines(tmp_path / "whole").values())) == 200, said
    code, said = regen_main(capsys, *argv, str(tmp_path / "turns"), "--expand-turns")
    assert code == 0 and sum(map(len, _lines(tmp_path / "turns").values())) == 250, said  # one row a turn


def test_export_partial_over_a_damaged_part(run: Path, tmp_path: Path, capsys: Capture) -> None:
    (run / "shards" / "w0-0009.parquet").write_bytes(b"PAR1 not a parquet file")
    argv = ["export", str(run), "--format", "chat", "--file-format", "jsonl"]
    code, _ = regen_main(capsys, *argv, "--out", str(tmp_path / "refused"))
    assert code == 2 and not (tmp_path / "refused" / "data").exists()
    code, said = regen_main(capsys, *argv, "--out", str(tmp_path / "partial"), "--partial")
    assert code == 0 and sum(map(len, _lines(tmp_path / "partial").values())) == 200, said


def test_export_repaired_original_and_on_reject(tmp_path: Path, capsys: Capture) -> None:
    moved = tmp_path / "elsewhere" / "data.jsonl"  # not the run's input.path: only --original finds it
    moved.parent.mkdir()
    moved.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in original_rows()))
    run = repair_run(tmp_path, tmp_path / "gone.jsonl", ACCEPTED, ["again"])
    argv = ["export", str(run), "--format", "repaired", "--original", str(moved)]
    code, said = regen_main(capsys, *argv, "--out", str(tmp_path / "kept"))
    assert code == 0, said
    kept = [orjson.loads(x)["id"] for x in (tmp_path / "kept" / "data.jsonl").read_bytes().splitlines()]
    code, said = regen_main(capsys, *argv, "--out", str(tmp_path / "dropped"), "--on-reject", "drop")
    assert code == 0, said
    dropped = [orjson.loads(x)["id"] for x in (tmp_path / "dropped" / "data.jsonl").read_bytes().splitlines()]
    assert "again" in kept and dropped == [i for i in kept if i != "again"]


# -- merge -----------------------------------------------------------------------------------------------------


def test_merge_target_rows_and_rejects(run: Path, capsys: Capture) -> None:
    (run / "shards" / ".w0-0004.parquet.tmp").unlink()
    for k in range(3):  # three more small reject files
        write(run / "rejects" / f"w0-{k + 1:04d}.parquet", [row(3000 + 10 * k + j, random.Random(5), reason="truncated",
              detail="d", finish_reason="length") for j in range(10)], rejects=True)  # fmt: skip
    shards, rejects = sorted(ids_in(run / "shards")), sorted(ids_in(run / "rejects"))
    code, said = regen_main(capsys, "merge", str(run), "--target-rows", "100")
    assert code == 0, said
    assert len(list((run / "shards").glob("*.parquet"))) == 2  # 200 rows in files of about 100
    assert len(list((run / "rejects").glob("*.parquet"))) == 4  # rejects left alone without --rejects
    code, said = regen_main(capsys, "merge", str(run), "--target-rows", "100", "--rejects")
    assert code == 0, said
    assert len(list((run / "rejects").glob("*.parquet"))) == 1  # 60 rows: one file
    assert sorted(ids_in(run / "shards")) == shards and sorted(ids_in(run / "rejects")) == rejects


# -- audit -----------------------------------------------------------------------------------------------------


def test_audit_field_flags(tmp_path: Path, capsys: Capture) -> None:
    planted = write_planted(tmp_path / "planted.jsonl", 60)
    data = tmp_path / "renamed.jsonl"  # the conversation under `conv`, the id under `key`
    data.write_bytes(
        b"".join(
            orjson.dumps({"key": r["id"], "conv": r["messages"], "source": r["source"]}) + b"\n" for r, _, _ in planted
        )
    )
    failing = [r["id"] for r, reason, _ in planted if reason]
    ids_out, page = tmp_path / "failing.txt", tmp_path / "audit.html"
    argv = ["audit", str(data), "--messages-field", "conv", "--id-field", "key", "--format", "jsonl"]
    extra = ["--by", "source", "--examples", "1", "--seed", "3", "--ids-out", str(ids_out), "--html", str(page)]
    code, report = regen_json(capsys, *argv, *extra)
    assert code == 1 and report["rows"] == 60 and report["failing_rows"] == len(failing) > 0
    assert ids_out.read_text().splitlines() == failing  # ids from `key`, not row:<n>
    assert "bad_input" not in report["by_reason"]  # the conversations were found under `conv`
    assert page.exists()
    assert all(len(examples) <= 1 for examples in report.get("examples", {}).values())
    by_source = report.get("by") or report.get("by_column")
    assert by_source, sorted(report)
    code, lax = regen_json(capsys, *argv, "--no-thinking")  # no reasoning expected: empty reasoning is fine
    assert report["by_reason"].get("empty_reasoning") and not lax["by_reason"].get("empty_reasoning")


def test_audit_config_and_set(tmp_path: Path, capsys: Capture) -> None:
    planted = write_planted(tmp_path / "planted.jsonl", 30)
    data = tmp_path / "renamed.jsonl"
    data.write_bytes(b"".join(orjson.dumps({"key": r["id"], "conv": r["messages"]}) + b"\n" for r, _, _ in planted))
    cfg = tmp_path / "audit.toml"  # [input] from the config, the id field from --set
    cfg.write_text(f'[input]\npath = "{data}"\nmessages_field = "conv"\n')
    ids_out = tmp_path / "failing.txt"
    argv = ["audit", "--config", str(cfg), "--set", 'input.id_field="key"', "--ids-out", str(ids_out)]
    code, report = regen_json(capsys, *argv)
    assert code == 1 and report["rows"] == 30 and "bad_input" not in report["by_reason"]
    assert ids_out.read_text().splitlines() == [r["id"] for r, reason, _ in planted if reason]


# -- preflight -------------------------------------------------------------------------------------------------


def test_preflight_json_exits_1_on_drift(tmp_path: Path, sim, capsys: Capture) -> None:
    server: SimProcess = sim(*SIM_FLAGS)
    cfg = tmp_path / "p.toml"
    cfg.write_text(
        '[input]\npath = "x.jsonl"\n[generation]\nmodel = "Qwen3.6-27B"\n[[endpoints]]\nurl = "http://127.0.0.1:9"\n'
        '[expect]\nreasoning_parser = "qwen3"\n'
    )
    argv = ["preflight", str(cfg), "--endpoint", server.url, "--no-probe"]
    code, report = regen_json(capsys, *argv)
    assert code == 0 and report["ok"] is True and [e["url"] for e in report["endpoints"]] == [server.url]
    code, report = regen_json(capsys, *argv, "--set", 'expect.speculative_algorithm="EAGLE"')
    assert code == 1 and report["ok"] is False
    (endpoint,) = report["endpoints"]
    failed = [c for c in endpoint["checks"] if not c["ok"]]
    assert [(c["key"], c["expected"]) for c in failed] == [("speculative_algorithm", "EAGLE")]
    assert server.stats()["probes"]["requests"] == 0  # --no-probe: no thinking probe was sent
