"""`regen audit` (dataset/audit.py) on a dataset with planted defects: each one counted exactly, by reason, by turn
and by column; the id list; exit codes; the stored-text split (inputs/stored.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.config import ValidateConfig
from pipeline.dataset.audit import AuditOptions, audit_dataset, format_audit, read_ids
from pipeline.inputs import conversations
from pipeline.inputs.row_audit import audit_row, regenerated_positions
from pipeline.inputs.stored import split_inline, split_message
from tests.helpers.paths import SHARED, needs_shared
from tests.helpers.planted_defects import planted_row, planted_turn, write_planted


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_every_planted_defect_is_counted_by_reason_turn_and_column(tmp_path: Path, suffix: str) -> None:
    rows = write_planted(tmp_path / f"data{suffix}", 2200)
    report = audit_dataset(str(tmp_path / f"data{suffix}"), AuditOptions(by="source"))
    expected: dict[str, int] = {}
    by_turn: dict[str, dict[str, int]] = {}
    by_source: dict[str, int] = {}
    for row, reason, turn in rows:
        if reason:
            expected[reason] = expected.get(reason, 0) + 1
            by_turn.setdefault(str(turn), {}).setdefault(reason, 0)
            by_turn[str(turn)][reason] += 1
            by_source[row["source"]] = by_source.get(row["source"], 0) + 1
    assert report["rows"] == 2200
    assert report["by_reason"] == dict(sorted(expected.items(), key=lambda kv: (-kv[1], kv[0])))
    assert report["failing_rows"] == sum(expected.values()) == report["failing_turns"]
    assert {k: t["by_reason"] for k, t in report["by_turn"].items() if t["by_reason"]} == by_turn
    assert {k: g["failing_rows"] for k, g in report["groups"].items()} == by_source
    assistant = sum(len([m for m in r["messages"] if m["role"] == "assistant"]) for r, _, _ in rows)
    assert report["assistant_turns"] == assistant + report["missing_turns"]
    assert report["missing_turns"] == 200  # one row in 11 ends with an unanswered user turn
    for reason, examples in report["examples"].items():
        assert 1 <= len(examples) <= 3 and all(ex["id"].startswith("row-") for ex in examples), reason
    assert report["lengths"]["answer_chars"]["count"] == assistant


def test_examples_are_reproducible_with_a_seed(tmp_path: Path) -> None:
    write_planted(tmp_path / "d.jsonl", 500)
    a, b, c = (audit_dataset(str(tmp_path / "d.jsonl"), AuditOptions(seed=s)) for s in (1, 1, 2))
    assert a["examples"] == b["examples"] != c["examples"]


def test_ids_out_and_exit_codes_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = write_planted(tmp_path / "d.jsonl", 220)
    ids = tmp_path / "bad.txt"
    assert main(["audit", str(tmp_path / "d.jsonl"), "--json", "--ids-out", str(ids), "--by", "source"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {"rows", "assistant_turns", "failing_rows", "by_reason"} <= set(report)
    assert ids.read_text().splitlines() == [r["id"] for r, reason, _ in rows if reason]
    assert read_ids(ids) == {r["id"] for r, reason, _ in rows if reason}
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r, reason, _ in rows if not reason))
    assert main(["audit", str(clean)]) == 0
    assert "failing: 0 rows" in capsys.readouterr().out
    assert main(["audit", str(tmp_path / "nope.jsonl")]) == 2
    assert "not found" in capsys.readouterr().err


def test_row_numbers_stand_for_rows_without_an_id(tmp_path: Path) -> None:
    rows = write_planted(tmp_path / "d.parquet", 44, with_id=False)
    audit_dataset(str(tmp_path / "d.parquet"), ids_out=tmp_path / "bad.txt")
    assert (tmp_path / "bad.txt").read_text().splitlines() == [f"row:{i}" for i, (_, r, _) in enumerate(rows) if r]


def test_sharegpt_sample_and_html(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parent.parent / "data" / "sample_conversations.jsonl"
    html = tmp_path / "audit.html"
    assert main(["audit", str(sample), "--no-thinking", "--html", str(html), "--by", "source"]) == 1
    page = html.read_text()
    assert "regen audit" in page and "empty_response" in page and "data:image/png;base64," in page


def test_no_thinking_does_not_ask_for_reasoning() -> None:
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "an answer"}]}
    assert audit_row(row, AuditOptions(thinking=True)).reasons() == ["empty_reasoning"]
    assert not audit_row(row, AuditOptions(thinking=False)).failing
    looping = {"messages": [row["messages"][0], {"role": "assistant", "content": "one two three four " * 40}]}
    opts = AuditOptions(thinking=False, validate=ValidateConfig(max_repetition=0.5))
    assert audit_row(looping, opts).reasons() == ["degenerate_repetition"]
    # 760 characters of one phrase, then the answer ends: by default repetition a model may have ended itself
    assert not audit_row(looping, AuditOptions(thinking=False)).failing
    strict = AuditOptions(thinking=False, validate=ValidateConfig(reject_looping="any"))
    assert audit_row(looping, strict).reasons() == ["looping"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain answer", (None, "plain answer", False)),
        ("<think>\nr\n</think>\n\nanswer", ("r", "answer", False)),
        ("<think>r and on", ("r and on", "", True)),
        ("r</think>answer", ("r", "answer", False)),  # the template put <think> in the prompt
        ("<think></think>answer", (None, "answer", False)),
        ("<think>a</think>b</think>c", ("a", "b</think>c", False)),
    ],
    ids=["plain", "inline", "unterminated", "close-only", "empty-think", "two-closes"],
)
def test_split_inline(text: str, expected: tuple[str | None, str, bool]) -> None:
    assert split_inline(text) == expected


def test_split_message_prefers_a_reasoning_field() -> None:
    assert split_message({"reasoning_content": " r "}, "a") == ("r", "a", False, "reasoning_content")
    assert split_message({"thinking": "t"}, "a") == ("t", "a", False, "thinking")
    assert split_message({"reasoning_content": None}, "<think>r</think>a") == ("r", "a", False, "inline")
    assert split_message({"reasoning_content": None}, "a") == (None, "a", False, "reasoning_content")


def _conv(*turns: str, system: bool = False, trailing: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}] if system else []
    for k, kind in enumerate(turns):
        out += [{"role": "user", "content": f"Q{k}?"}, planted_turn(kind, k)]
    return out + ([{"role": "user", "content": "And?"}] if trailing else [])


@pytest.mark.parametrize(
    ("turns", "trailing", "repair", "mode", "expected"),
    [
        (("clean", "empty", "clean"), False, "from_first_bad_turn", "all", (3, 5)),
        (("clean", "empty", "clean"), False, "conversation", "all", (1, 3, 5)),
        (("truncated", "clean"), False, "from_first_bad_turn", "all", (1, 3)),
        (("clean", "clean"), True, "from_first_bad_turn", "all", (5,)),  # only the missing answer
        (("clean", "marker", "clean"), False, "from_first_bad_turn", "last", (5,)),
        (("clean", "clean"), False, "from_first_bad_turn", "all", (1, 3)),  # nothing fails: the whole row
    ],
    ids=["middle-turn", "conversation", "first-turn", "missing-answer", "turns-last", "clean-row"],
)
@pytest.mark.parametrize("system", [False, True], ids=["no-system", "system"])
def test_regenerated_positions_start_at_the_first_failing_turn(
    turns: tuple[str, ...], trailing: bool, repair: str, mode: str, expected: tuple[int, ...], system: bool
) -> None:
    raw = _conv(*turns, system=system, trailing=trailing)
    verdict = audit_row({"messages": raw}, AuditOptions())
    messages = conversations.parse(raw, "messages")
    shift = 1 if system else 0
    assert regenerated_positions(messages, mode, repair, verdict) == tuple(p + shift for p in expected)
    # the reader's messages may carry `input.system_prompt` first: the same turns, one position later
    if not system:
        with_prompt = ({"role": "system", "content": "S"}, *messages)
        assert regenerated_positions(with_prompt, mode, repair, verdict) == tuple(p + 1 for p in expected)


@pytest.mark.parametrize("gz", [False, True], ids=["jsonl", "jsonl.gz"])
def test_blocks_in_worker_processes_give_the_report_of_one_process(tmp_path: Path, gz: bool) -> None:
    path = tmp_path / "d.jsonl"
    write_planted(path, 400, with_id=False)
    data = b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\n\n", 3) + b"{not json\n" + b'{"id": 1}'
    if gz:
        path = tmp_path / "d.jsonl.gz"
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    reports = []
    for jobs, block in ((1, 1 << 20), (1, 3000), (2, 3000)):  # one block; many; many in two processes
        ids = tmp_path / f"ids-{jobs}-{block}.txt"
        opts = AuditOptions(jobs=jobs, block_bytes=block, by="source", seed=3)
        report = audit_dataset(str(path), opts, ids_out=ids)
        reports.append(({k: v for k, v in report.items() if k not in ("elapsed_s", "rows_per_s")}, ids.read_text()))
    one, many, pooled = reports
    assert pooled == many
    assert one[0]["rows"] == 402 and one[0]["by_reason"]["bad_input"] == 2
    for key in ("rows", "failing_rows", "by_reason", "by_turn", "groups", "lengths"):
        assert one[0][key] == many[0][key], key
    assert one[1] == many[1]  # the same ids, row numbers counted over the whole file
    sources = {ex["source"] for exs in many[0]["examples"].values() for ex in exs}
    lines = data.split(b"\n")
    for source in sources:  # line numbers count over the whole file, blocks or not
        n = int(source.rsplit(":", 1)[1])
        assert lines[n - 1].strip(), source


@needs_shared("datasets", "fastchat_dummy_conversation.json")
def test_a_dataset_without_reasoning_gets_a_hint_about_no_thinking() -> None:
    """FastChat's dummy conversations (../shared/datasets, read in place) store no reasoning at all."""
    path = str(SHARED / "datasets" / "fastchat_dummy_conversation.json")
    text = format_audit(audit_dataset(path, AuditOptions(jobs=1)))
    assert "hint: 500 rows fail for want of reasoning" in text and "`--no-thinking`" in text
    assert "hint:" not in format_audit(audit_dataset(path, AuditOptions(thinking=False, jobs=1)))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_duplicate_ids_are_reported_as_run_would_refuse_them(
    tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`regen run` refuses a file with repeated ids; the audit says so, across blocks (worker processes) and files."""
    folder = tmp_path / "d"
    folder.mkdir()
    rows = [r for r, _, _ in (planted_row(i) for i in range(300))]
    again = [dict(rows[5]), dict(rows[250]), dict(rows[5])]  # 'id' 5 three times in all, 250 twice
    first, second = rows[:200], rows[200:] + again
    for name, part in (("a", first), ("b", second)):
        path = folder / f"{name}{suffix}"
        if suffix == ".jsonl":
            path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in part))
        else:
            pq.write_table(pa.Table.from_pylist([{"id": r["id"], "messages": r["messages"]} for r in part]), path)
    report = audit_dataset(str(folder), AuditOptions(block_bytes=4096) if suffix == ".jsonl" else AuditOptions())
    dup = report["duplicate_ids"]
    assert (dup["rows"], dup["ids"]) == (3, 2)
    assert [d["id"] for d in dup["examples"]] == [rows[5]["id"], rows[250]["id"], rows[5]["id"]]
    row = 101 if suffix == ".jsonl" else 100  # a line number counts from 1, a Parquet row from 0 (as `run` names them)
    assert dup["examples"][0]["again"].endswith(f"b{suffix}:{row}")
    assert main(["audit", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "duplicate ids: 3 rows repeat an earlier row's id (2 ids)" in out and "input.dedupe = true" in out
    clean = write_planted(tmp_path / "clean.jsonl", 50)
    assert clean and audit_dataset(str(tmp_path / "clean.jsonl"))["duplicate_ids"] == {
        "rows": 0,
        "ids": 0,
        "examples": [],
    }


def test_duplicate_ids_across_closed_runs_and_within_a_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seen ids are kept in sorted runs of at most SeenHashes.RUN hashes: a repeat is found whether its first row is
    in a closed run, the open one or earlier in the same block, with the same counts and examples as a plain set."""
    from pipeline.store.doneset import SeenHashes

    rows = [r for r, _, _ in (planted_row(i) for i in range(400))]
    order = rows[:150] + [rows[3], rows[149]] + rows[150:] + [rows[399], rows[3], rows[200]]
    order.insert(160, dict(rows[155]))  # a repeat of a row five lines earlier, likely in the same block
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in order))
    want = audit_dataset(str(path), AuditOptions(block_bytes=2048, jobs=1))["duplicate_ids"]
    monkeypatch.setattr(SeenHashes, "RUN", 16)
    got = audit_dataset(str(path), AuditOptions(block_bytes=2048, jobs=1))["duplicate_ids"]
    assert got == want
    assert (got["rows"], got["ids"]) == (6, 5)
    assert [d["id"] for d in got["examples"]] == [rows[i]["id"] for i in (3, 149, 155, 399, 3)]
    seen = SeenHashes()
    assert seen.repeats(np.array([5, 9, 5], dtype=np.uint64)) == [2]
    assert seen.repeats(np.array([9, 7, 7, 5], dtype=np.uint64)) == [0, 2, 3]
