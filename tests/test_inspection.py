"""inspect_run and run_status over hand-built RUN_DIRs with planted defects (see tests/helpers/inspection_runs.py).

Expected filter counts were cross-checked with an independent DuckDB query over the same files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import orjson
import pytest

from pipeline.inspection import (
    WhereError,
    format_inspect,
    format_status,
    inspect_run,
    parse_where,
    run_status,
)
from pipeline.inspection.scan import sample_ranges
from pipeline.inspection.textmeasures import looping_text
from pipeline.inspection.textview import elide
from tests.helpers.inspection_runs import LOOP, T0, A, B, C, add_journal, build_run, row, write


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return build_run(tmp_path, total_extra=10)


def test_counts_reasons_and_finish_reasons(run: Path) -> None:
    r = inspect_run(run)
    assert (r["rows"], r["accepted"], r["rejected"]) == (230, 200, 30)
    assert r["rejected_by_reason"] == {"empty_response": 25, "truncated": 5}
    assert r["finish_reasons"] == {"stop": 225, "length": 5}
    assert r["percentiles"]["completion_tokens"]["count"] == 200
    assert r["percentiles"]["reasoning_tokens"]["p50"] == pytest.approx(224.5, abs=1)


def test_bad_shard_and_bad_endpoint_stand_out(run: Path) -> None:
    r = inspect_run(run)
    flagged = {(f["kind"], f["name"]): f["flags"] for f in r["flagged"]}
    assert set(flagged) == {("shard", "shards/w0-0002.parquet"), ("endpoint", B)}
    assert any(x.startswith("empty_answer 40%") for x in flagged[("shard", "shards/w0-0002.parquet")])
    assert any(x.startswith("repetition 20%") for x in flagged[("shard", "shards/w0-0002.parquet")])
    assert flagged[("endpoint", B)] == ["reject 27% vs 4% elsewhere"]
    assert r["per_endpoint"][B]["reject_rate"] == pytest.approx(25 / 92)
    assert r["per_shard"]["shards/w0-0000.parquet"]["flags"] == []
    assert "20 accepted rows have an empty answer" in r["warnings"]


def test_empty_short_looping_and_shared_answers(run: Path) -> None:
    r = inspect_run(run)
    assert r["empty_answers"]["rows"] == 20
    assert r["empty_answers"]["examples"][:2] == ["p00100", "p00101"]
    assert r["repetition"]["rows"] == 10
    assert r["repetition"]["examples"][0] == "p00120"
    assert r["short_answers"]["rows"] == 4
    assert "p00045" in r["short_answers"]["examples"]
    top = r["duplicates_answers"]["top"]
    assert top[0]["count"] == 5 and top[0]["answer"].startswith("I'm sorry")
    assert r["duplicates_answers"]["rows"] == 5


def test_looping_rule() -> None:
    assert looping_text("The same sentence again and again, forever. " * 30)
    prose = " ".join(f"word{i} and then something else {i * 7}" for i in range(200))
    assert not looping_text(prose)
    assert not looping_text("short")


def test_sample_is_reproducible_and_spread(run: Path) -> None:
    first = [s["id"] for s in inspect_run(run, sample=12, seed=3)["sample"]]
    again = [s["id"] for s in inspect_run(run, sample=12, seed=3)["sample"]]
    other = [s["id"] for s in inspect_run(run, sample=12, seed=4)["sample"]]
    assert first == again and len(set(first)) == 12
    assert first != other
    report = inspect_run(run, sample=12, seed=3)
    assert len({s["file"] for s in report["sample"]}) > 1
    assert all(s["file"].startswith("shards/") for s in report["sample"])
    one = report["sample"][0]
    assert one["prompt"].startswith("question") and one["answer"] is not None and one["finish_reason"] == "stop"


def test_sample_rows_match_their_ids(run: Path) -> None:
    for s in inspect_run(run, sample=30, seed=9)["sample"]:
        i = int(s["id"][1:])
        assert s["prompt"] == f"question {i}?"
        assert s["completion_tokens"] == 300 + i % 50


@pytest.mark.parametrize(
    ("kwargs", "rows", "accepted"),
    [
        ({"reason": "truncated"}, 5, 0),
        ({"endpoint": B}, 92, 67),
        ({"shard": "w0-0002*"}, 50, 50),
        ({"shard": "rejects/*"}, 30, 0),
        ({"where": "finish_reason == 'length'"}, 5, 0),
        ({"where": "completion_tokens >= 340"}, 40, 40),
        ({"where": "answer_chars < 1 and endpoint != 'http://b:30000'"}, 13, 13),
        ({"where": "reasoning_tokens > 245 or id == 'p00001'"}, 17, 17),
        ({"where": "reason is not null"}, 30, 0),
        ({"where": "answer contains 'sorry'"}, 5, 5),
    ],
    ids=[
        "reason",
        "endpoint",
        "shard",
        "rejects-glob",
        "where-str",
        "where-int",
        "where-and",
        "where-or",
        "null",
        "contains",
    ],
)
def test_filters(run: Path, kwargs: dict[str, str], rows: int, accepted: int) -> None:
    r = inspect_run(run, sample=3, **kwargs)  # type: ignore[arg-type]
    assert (r["rows"], r["accepted"]) == (rows, accepted)
    if "reason" in kwargs:
        assert all(s["reason"] == kwargs["reason"] for s in r["sample"])


@pytest.mark.parametrize(
    "text",
    ["nope > 3", "completion_tokens >", "completion_tokens ~ 3", "finish_reason == stop", "a == 1 xor b == 2", ""],
    ids=["unknown-column", "no-value", "bad-op", "unquoted", "bad-joiner", "empty"],
)
def test_where_errors(text: str) -> None:
    with pytest.raises(WhereError):
        parse_where(text, {"completion_tokens", "finish_reason", "a", "b"})


def test_unknown_shard_is_an_error(run: Path) -> None:
    with pytest.raises(WhereError, match="matches no file"):
        inspect_run(run, shard="nothing*")


def test_report_is_plain_json(run: Path) -> None:
    text = json.dumps(inspect_run(run, sample=2))  # stdlib json: fails on numpy scalars
    assert '"rows": 230' in text


def test_format_inspect_elides_and_wraps(run: Path) -> None:
    r = inspect_run(run, sample=2, where="reasoning_chars > 2000")
    text = format_inspect(r, width=80)
    assert "chars elided]" in text
    assert "shards/w0-0002.parquet" in text and "attention:" in text
    sample_part = text[text.index("── sample 1/") :]
    assert max(len(line) for line in sample_part.splitlines()) <= 80
    assert elide("x" * 1000, 10, 10).startswith("x" * 10 + " … [980 chars elided]")


def test_empty_run(tmp_path: Path) -> None:
    r = inspect_run(tmp_path, sample=3)
    assert r["rows"] == 0 and r["sample"] == [] and r["flagged"] == []
    s = run_status(tmp_path)
    assert (s["done"], s["total"], s["pending"]) == (0, None, None)
    assert "total unknown" in format_status(s)


def test_status_counts_an_in_progress_run(run: Path) -> None:
    add_journal(run)
    s = run_status(run, now=T0 + 400)
    assert s["total"] == 240
    assert (s["accepted"], s["rejected"]) == (203, 31)  # +3 accepted, +1 rejected; p00000 counted once
    assert s["in_journal"] == 4
    assert s["pending"] == 240 - 234
    assert s["rejected_by_reason"] == {"empty_response": 25, "truncated": 5, "http_4xx": 1}
    assert s["endpoints"][B]["rejected"] == 25
    assert s["rates"]["source"] == "rows"
    assert s["rates"]["completions_per_s"] > 0
    json.dumps(s)


def test_inspect_reads_the_journals_rows_not_yet_in_shards(run: Path) -> None:
    """Mid-run, before a shard commits, inspect sees the finished rows too, and says which are which."""
    before = inspect_run(run, sample=0)
    add_journal(run)
    r = inspect_run(run, sample=300, seed=1)
    assert r["journal"] == {"accepted": 3, "rejected": 1}  # p00000 is committed already: counted once
    assert (r["rows"], r["accepted"], r["rejected"]) == (before["rows"] + 4, before["accepted"] + 3,
                                                         before["rejected"] + 1)  # fmt: skip
    assert r["rejected_by_reason"]["http_4xx"] == before["rejected_by_reason"].get("http_4xx", 0) + 1
    labels = set(r["per_shard"])
    assert {"journal/accepted (not yet in shards)", "journal/rejected (not yet in shards)"} <= labels
    files = {s["id"]: s["file"] for s in r["sample"]}
    assert files["p02000"] == "journal/accepted (not yet in shards)" and files["p00000"].startswith("shards/")
    assert "including 3 accepted and 1 rejected rows still in the journals" in format_inspect(r)
    assert not list(run.glob("**/journal-*.parquet"))  # nothing written under RUN_DIR


def test_inspect_sees_a_run_with_no_shard_yet(tmp_path: Path) -> None:
    add_journal(tmp_path)
    r = inspect_run(tmp_path, sample=5)
    assert (r["rows"], r["accepted"], r["rejected"], r["files"]) == (5, 4, 1, 2)  # p00000 uncommitted here too


def test_status_rates_from_created_at(tmp_path: Path) -> None:
    rng = random.Random(1)
    rows = [row(i, rng, created_at=int((T0 + i * 0.5) * 1e6), completion_tokens=100) for i in range(100)]
    write(tmp_path / "shards" / "a.parquet", rows)
    s = run_status(tmp_path, now=T0 + 50)
    assert s["rates"]["completions_per_s"] == pytest.approx(100 / 49.5)
    assert s["rates"]["output_tokens_per_s"] == pytest.approx(100 * 100 / 49.5)
    assert s["rates"]["recent_completions_per_s"] == pytest.approx(100 / 60)
    assert s["eta_s"] is None  # no total in a RUN_DIR without run.json


def test_status_uses_fresh_metrics(run: Path) -> None:
    now = T0 + 1000
    (run / "metrics").mkdir()
    for w in (0, 1):
        lines = [
            {
                "t": now - 20 + k,
                "done": 100 + 2 * k,
                "accepted": 90 + 2 * k,
                "rejected": 10,
                "output_tokens": 1000 * k,
                "endpoints": {A: {"inflight": 3 + w, "ok": 50, "errors": 1, "latency_p50": 1.5}},
                "last_errors": [f"worker {w}: 503 at {k}"],
            }
            for k in range(21)
        ]
        blob = b"\n".join(orjson.dumps(x) for x in lines) + b'\n{"t": 1'
        (run / "metrics" / f"worker-{w}.jsonl").write_bytes(blob)
    s = run_status(run, now=now)
    assert s["rates"]["source"] == "metrics"
    assert s["rates"]["recent_completions_per_s"] == pytest.approx(4.0)
    assert s["rates"]["recent_output_tokens_per_s"] == pytest.approx(2000.0)
    assert s["eta_s"] == pytest.approx(10 / 4.0)
    assert s["endpoints"][A]["inflight"] == 7 and s["endpoints"][A]["errors"] == 2
    assert s["endpoints"][A]["accepted"] == 67
    assert len(s["last_errors"]) == 2 and "503" in s["last_errors"][0]
    text = format_status(s)
    assert "ETA 0m02s" in text and "last errors:" in text and C in text


def test_skipping_reasoning_keeps_answer_checks(run: Path) -> None:
    r = inspect_run(run, reasoning=False)
    assert r["empty_answers"]["rows"] == 20 and r["short_answers"]["rows"] == 4
    assert r["repetition"]["rows"] == 0  # the planted loops are in the reasoning, which was not read
    assert r["percentiles"]["reasoning_tokens"]["count"] == 200


def test_looping_is_sampled_and_still_finds_the_bad_shard(tmp_path: Path) -> None:
    """Shards of 400 rows, looping checked on 100 per shard: shard 3 loops on 30% of its rows spread all over it,
    and stands out; the report says how many rows were checked."""
    rng = random.Random(5)
    for s in range(6):
        rows = [row(s * 400 + k, rng, **({"reasoning": LOOP} if s == 3 and k % 10 < 3 else {})) for k in range(400)]
        write(tmp_path / "shards" / f"s{s}.parquet", rows)
    r = inspect_run(tmp_path, text_sample_rows=100)
    rep = r["repetition"]
    assert (rep["checked"], rep["of"]) == (6 * 100, 2400)
    assert rep["rows"] == 30 and rep["rate"] == pytest.approx(30 / 600)
    assert r["per_shard"]["shards/s3.parquet"]["repetition_checked"] == 100
    flagged = {f["name"]: f["flags"] for f in r["flagged"]}
    assert list(flagged) == ["shards/s3.parquet"]
    assert any(x.startswith("repetition 30%") for x in flagged["shards/s3.parquet"])
    assert "checked 600 of 2,400 rows" in format_inspect(r)
    assert inspect_run(tmp_path, text_sample_rows=100)["repetition"] == rep  # the same rows every time
    full = inspect_run(tmp_path, text_sample_rows=10_000)["repetition"]
    assert (full["rows"], full["checked"]) == (120, 2400)


def test_sample_ranges_spread_over_the_file() -> None:
    assert sample_ranges([25, 25], 100) == [(0, 0, 25), (1, 25, 25)]
    assert sample_ranges([25] * 16, 100) == [(0, 0, 25), (5, 125, 25), (10, 250, 25), (15, 375, 25)]
    assert sample_ranges([10_000], 512) == [(0, 0, 512)]  # one huge group: its head only


def test_shared_answers_are_exact_not_fingerprints(tmp_path: Path) -> None:
    """Answers equal in length and in every fingerprinted window but different elsewhere are not shared."""
    rng = random.Random(2)
    base = "x" * 30 + "{}" + "y" * 30
    rows = [row(k, rng, answer=base.format(f"{k:02d}")) for k in range(20)]
    rows += [row(100 + k, rng, answer="  The canned reply, with spaces around.\n") for k in range(3)]
    write(tmp_path / "shards" / "a.parquet", rows)
    dup = inspect_run(tmp_path)["duplicates_answers"]
    assert dup["rows"] == 3 and [d["count"] for d in dup["top"]] == [3]


def test_status_rates_survive_a_worker_restart(tmp_path: Path) -> None:
    """A worker killed and started again writes to the same metrics file with counters from zero: the recent rate
    is the new process's own, never the difference of the two (it printed -3522.60/s)."""
    now = T0 + 100
    metrics = tmp_path / "metrics"
    metrics.mkdir(parents=True)
    old = [{"t": now - 20 + i, "started": now - 500, "done": 5000 + 100 * i, "output_tokens": 10**6 + 10**4 * i}
           for i in range(10)]  # fmt: skip
    new = [{"t": now - 9 + i, "started": now - 10, "done": 10 * i, "output_tokens": 1000 * i} for i in range(10)]
    (metrics / "worker-0.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in old + new))
    (tmp_path / "heartbeats").mkdir()
    s = run_status(tmp_path, now=now)
    assert s["rates"]["source"] == "metrics"
    assert s["rates"]["recent_completions_per_s"] == pytest.approx(10.0)
    assert s["rates"]["recent_output_tokens_per_s"] == pytest.approx(1000.0)
    for line in old + new:  # lines from before `started` was written: cut at the counter that went down
        del line["started"]
    (metrics / "worker-0.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in old + new))
    assert run_status(tmp_path, now=now)["rates"]["recent_completions_per_s"] == pytest.approx(10.0)
