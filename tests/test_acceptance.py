"""pipeline.store.acceptance: the server's speculative acceptance read from committed files and journal rows, one
sample per generated turn, and the figures status, inspect, the card and the Prometheus exporter give of it."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.engine.metrics import Metrics
from pipeline.engine.prometheus import Exporter
from pipeline.inspection.textview import spec_lines, spec_tables
from pipeline.store import acceptance


def _turn(accept: float | None, steps: int | None, tokens: int, endpoint: str = "http://a") -> dict:
    return {"answer": "x" * 50, "spec_accept_length": accept, "spec_verify_ct": steps, "completion_tokens": tokens,
            "endpoint": endpoint}  # fmt: skip


def _file(tmp_path: Path) -> Path:
    turns = [
        [_turn(2.0, 50, 100)],
        [_turn(3.0, 10, 30), _turn(4.0, 500, 2000, "http://b")],  # a conversation: two requests
        [_turn(None, None, 40)],  # a server that reported none
    ]
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "spec_accept_length": pa.array([t[-1]["spec_accept_length"] for t in turns], pa.float32()),
            "spec_verify_ct": pa.array([t[-1]["spec_verify_ct"] for t in turns], pa.int32()),
            "completion_tokens": pa.array([t[-1]["completion_tokens"] for t in turns], pa.int32()),
            "endpoint": [t[-1]["endpoint"] for t in turns],
            "turns": turns,
        }
    )
    path = tmp_path / "part.parquet"
    pq.write_table(table, path)
    return path


def test_every_generated_turn_is_one_sample(tmp_path: Path) -> None:
    turns = acceptance.file_turns(_file(tmp_path))
    assert turns.row.tolist() == [0, 1, 1, 2] and turns.turn.tolist() == [0, 0, 1, 0]
    assert np.array_equal(turns.accept, [2.0, 3.0, 4.0, np.nan], equal_nan=True)
    s = acceptance.summary(turns)
    assert (s["turns"], s["reported"], s["mean"], s["p50"]) == (4, 3, 3.0, 3.0)
    assert s["weighted"] == pytest.approx((100 + 30 + 2000) / (50 + 10 + 500))  # tokens / verify steps
    assert acceptance.by_turn(turns)["1"]["mean"] == 4.0
    assert acceptance.by_endpoint(turns)["http://b"]["turns"] == 1
    assert list(acceptance.by_length(turns)) == ["<256", "1k-4k"]


def test_selected_rows_only(tmp_path: Path) -> None:
    turns = acceptance.file_turns(_file(tmp_path), np.array([1]))
    assert turns.row.tolist() == [1, 1] and turns.accept.tolist() == [3.0, 4.0]


def test_older_files_read_as_what_they_hold(tmp_path: Path) -> None:
    """Schema 1 (no `turns`): each row its own turn. Before schema 3: no acceptance at all, so every figure is None."""
    flat = tmp_path / "flat.parquet"
    pq.write_table(pa.table({"id": ["a"], "spec_accept_length": [2.5], "spec_verify_ct": [4], "endpoint": ["u"]}), flat)
    assert acceptance.file_turns(flat).accept.tolist() == [2.5]
    old = tmp_path / "old.parquet"
    pq.write_table(pa.table({"id": ["a"], "turns": [[{"answer": "x", "completion_tokens": 5}]]}), old)
    s = acceptance.summary(acceptance.file_turns(old))
    assert (s["turns"], s["reported"], s["mean"], s["weighted"]) == (1, 0, None, None)


def test_journal_rows_and_files_add_up(tmp_path: Path) -> None:
    journal = acceptance.row_turns([{"endpoint": "http://c", "spec_accept_length": 2, "spec_verify_ct": 3}])
    both = acceptance.concat([acceptance.file_turns(_file(tmp_path)), journal])
    assert len(both) == 5 and set(acceptance.by_endpoint(both)) == {"http://a", "http://b", "http://c"}
    assert acceptance.by_endpoint(both)["http://c"]["mean"] == 2.0
    assert acceptance.summary(acceptance.concat([]))["turns"] == 0


def test_the_text_views_say_what_was_measured_and_when_nothing_was() -> None:
    spec = {**acceptance.summary(acceptance.row_turns([_turn(2.5, 4, 10)])), "by_endpoint": {}}
    [line] = spec_lines(spec)
    assert "mean 2.50" in line and "tokens per verify step" in line and "1 of 1 turns" in line
    none = {**acceptance.summary(acceptance.row_turns([_turn(None, None, 10)])), "by_endpoint": {}}
    assert "none reported in 1 turns" in spec_lines(none)[0]
    assert spec_lines({**acceptance.summary(acceptance.EMPTY), "by_endpoint": {}}) == []  # nothing done yet
    report = {"of": "accepted", "overall": spec, "by_shard": {"shards/p": spec}, "by_endpoint": {}, "by_turn": {},
              "by_length": {}}  # fmt: skip
    assert "shards/p" in "\n".join(spec_tables(report))


def test_prometheus_has_each_endpoint_s_histogram_and_counters() -> None:
    metrics = Metrics()
    metrics.record_stored({"endpoint": "http://b", "turns": [_turn(3.0, 10, 30), _turn(4.0, 500, 2000, "http://b")]})
    metrics.record_stored({"endpoint": "http://a", "turns": [_turn(None, None, 40)]})
    exporter = Exporter("127.0.0.1", 0)
    try:
        exporter.start()
        exporter.publish({**metrics.snapshot(), "endpoints": {}})
        text = httpx.get(exporter.url, timeout=5).text
    finally:
        exporter.stop()
    assert 'regen_spec_accept_length_bucket{endpoint="http://a",le="3.0",worker="0"} 1.0' in text
    assert 'regen_spec_accept_length_count{endpoint="http://a",worker="0"} 1.0' in text
    assert 'regen_spec_accept_length_count{endpoint="http://b",worker="0"} 1.0' in text
    assert 'regen_spec_verify_steps_total{endpoint="http://b",worker="0"} 500.0' in text
    assert 'regen_spec_tokens_total{endpoint="http://a",worker="0"} 30.0' in text


def _many(tmp_path: Path, k: int, rows: int) -> Path:
    """A file of `rows` rows of 1-3 turns each, float32 acceptance as the store writes it, some of it missing."""
    rng = np.random.default_rng(k)
    turns = []
    for _ in range(rows):
        n = int(rng.integers(1, 4))
        accept = rng.uniform(1, 6, n)
        steps = rng.integers(1, 3000, n)
        known = rng.random(n) < 0.9
        turns.append(
            [
                _turn(float(a) if ok else None, int(v) if rng.random() < 0.8 else None, int(v * a), f"http://{ep}")
                for a, v, ok, ep in zip(accept, steps, known, rng.choice(list("abc"), n), strict=True)
            ]
        )
    schema = pa.struct(
        [
            ("spec_accept_length", pa.float32()),
            ("spec_verify_ct", pa.int32()),
            ("completion_tokens", pa.int32()),
            ("endpoint", pa.string()),
        ]
    )
    lists = pa.array([[{key: t[key] for key in schema.names} for t in row] for row in turns], pa.list_(schema))
    path = tmp_path / f"part-{k}.parquet"
    pq.write_table(pa.table({"id": [f"{k}-{i}" for i in range(rows)], "turns": lists}), path)
    return path


def test_a_tally_a_part_at_a_time_gives_the_concatenated_figures_to_the_bit(tmp_path: Path) -> None:
    """status and inspect add a file's turns at a time; the figures must be the ones the whole run's turns, joined,
    give: same values, same order, so the same pairwise sums (journal floats stay float64)."""
    parts = [acceptance.file_turns(_many(tmp_path, k, 3000)) for k in range(4)]
    parts.append(acceptance.row_turns([_turn(2.123456789, 7, 15, "http://d"), _turn(None, 3, 4, "http://a")]))
    tally = acceptance.Tally(["endpoint", "turn"])
    for part in parts:
        tally.add(part, {"endpoint": (part.endpoint, part.endpoints), "turn": (part.turn, range(3))})
    joined = acceptance.concat(parts)
    assert tally.summary() == acceptance.summary(joined)
    assert tally.by("endpoint") == acceptance.by_endpoint(joined)
    assert {str(k): v for k, v in tally.by("turn").items()} == acceptance.by_turn(joined)
    assert tally.summary()["reported"] < tally.summary()["turns"]


def test_sum64_is_numpys_sum_to_the_bit() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 7, 129, acceptance.SUM_CHUNK, acceptance.SUM_CHUNK + 1, 3 * acceptance.SUM_CHUNK + 13, 300_001):
        values = rng.lognormal(0, 3, n).astype(np.float32)
        assert acceptance.sum64(lambda lo, hi, v=values: v[lo:hi].astype(np.float64), n) == float(
            values.astype(np.float64).sum()
        )
