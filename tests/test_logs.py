"""The log's pieces without a run: the JSON and text formats, the burst cap, the progress line, and the exporter's
per-run registry (two at once in one process, each serving its own numbers)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import httpx
import orjson
import pytest

from pipeline.engine.logs import Burst, ProgressLog, configure
from pipeline.engine.metrics import Metrics
from pipeline.engine.prometheus import Exporter


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    root, regen, progress = logging.getLogger(), logging.getLogger("regen"), logging.getLogger("regen.progress")
    levels = root.level, regen.level, progress.level
    yield out
    for handler in [h for h in root.handlers if h.get_name() == "regen-cli"]:
        root.removeHandler(handler)
    root.setLevel(levels[0])
    regen.setLevel(levels[1])
    progress.setLevel(levels[2])


def test_json_lines_carry_the_event_fields(stream: io.StringIO) -> None:
    configure("json", stream=stream)
    logging.getLogger("regen.endpoints").warning("%s: down", "http://a", extra={"event": "endpoint_down", "url": "a"})
    logging.getLogger("other.library").warning("multi\nline")
    first, second = (orjson.loads(line) for line in stream.getvalue().splitlines())
    assert first["event"] == "endpoint_down" and first["msg"] == "http://a: down" and first["level"] == "WARNING"
    assert second["logger"] == "other.library" and second["msg"] == "multi\nline"


def test_text_lines_are_one_line_each(stream: io.StringIO) -> None:
    configure("text", stream=stream)
    logging.getLogger("regen.run").info("a\nb\rc")
    assert stream.getvalue().count("\n") == 1 and "\r" not in stream.getvalue()


def test_burst_caps_one_kind_of_event_and_says_how_many_it_dropped() -> None:
    now = [0.0]
    burst = Burst(burst=3, window_s=60, clock=lambda: now[0])

    def record(event: str = "endpoint_down") -> logging.LogRecord:
        rec = logging.LogRecord("regen.endpoints", logging.WARNING, "", 0, "down", (), None)
        rec.event = event
        return rec

    assert [burst.filter(record()) for _ in range(5)] == [True, True, True, False, False]
    assert burst.filter(record("endpoint_up"))  # another kind is counted on its own
    now[0] = 61.0
    late = record()
    assert burst.filter(late) and late.suppressed == 2 and "2 more" in late.getMessage()


def test_progress_line_rates_are_over_the_interval(stream: io.StringIO) -> None:
    configure("json", stream=stream)
    now = [100.0]
    lines = ProgressLog(clock=lambda: now[0])
    snap = {
        "total": 1000, "already_done": 400, "done": 0, "pending": 600, "output_tokens": 0, "elapsed_s": 1.0,
        "completions_per_s": 0.0, "rejected_by_reason": {},
        "endpoints": {"a": {"state": "healthy"}, "b": {"state": "down"}},
    }  # fmt: skip
    lines.emit(snap)
    now[0] += 60
    lines.emit({**snap, "done": 120, "pending": 480, "output_tokens": 240_000, "rejected_by_reason": {"truncated": 2}})
    last = orjson.loads(stream.getvalue().splitlines()[-1])
    assert last["done"] == 520 and last["total"] == 1000
    assert last["completions_per_s"] == 2.0 and last["output_tokens_per_s"] == 4000.0 and last["eta_s"] == 240
    assert last["endpoints_by_state"] == {"healthy": 1, "down": 1}
    assert "520/1000 prompts (52.0%) | 2.00 completions/s, 4,000 output tok/s | ETA 4m00s" in last["msg"]


def test_bad_input_rows_are_neither_progress_nor_rate(stream: io.StringIO) -> None:
    """Rows the reader refused were never sent: 150 of them in the first seconds are not 150 completions."""
    configure("json", stream=stream)
    now = [100.0]
    lines = ProgressLog(clock=lambda: now[0])
    snap = {
        "total": 283, "already_done": 0, "done": 0, "pending": 283, "output_tokens": 0, "elapsed_s": 1.0,
        "completions_per_s": 0.0, "rejected_by_reason": {}, "endpoints": {},
    }  # fmt: skip
    lines.emit(snap)
    now[0] += 10
    lines.emit({**snap, "done": 159, "pending": 124, "output_tokens": 9000, "rejected_by_reason": {"bad_input": 150}})
    last = orjson.loads(stream.getvalue().splitlines()[-1])
    assert last["done"] == 9 and last["total"] == 133 and last["refused"] == 150
    assert last["completions_per_s"] == 0.9
    assert "9/133 prompts (6.8%), 150 refused (bad_input, never sent) | 0.90 completions/s" in last["msg"]


def test_metrics_rates_leave_out_bad_input() -> None:
    metrics = Metrics(total=10)
    metrics.tick(now=0.0)
    for _ in range(8):
        metrics.record_reject("bad_input")
    metrics.record_accept(100)
    metrics.tick(now=1.0)
    snap = metrics.snapshot()
    assert snap["recent_completions_per_s"] == 1.0 and snap["done"] == 9


def test_two_exporters_in_one_process_serve_their_own_numbers() -> None:
    exporters = [Exporter("127.0.0.1", 0, worker=i) for i in range(2)]
    try:
        for i, exporter in enumerate(exporters):
            exporter.start()
            metrics = Metrics(total=10)
            for _ in range(i + 1):
                metrics.record_stored({"endpoint": "http://e", "completion_tokens": 7})
                metrics.record_accept(7)
            exporter.publish({**metrics.snapshot(), "endpoints": {}})
        texts = [httpx.get(e.url, timeout=5).text for e in exporters]
    finally:
        for exporter in exporters:
            exporter.stop()
    assert 'regen_completions_total{endpoint="http://e",worker="0"} 1.0' in texts[0]
    assert 'regen_completions_total{endpoint="http://e",worker="1"} 2.0' in texts[1]
    assert "regen_output_tokens_total" in texts[1] and "regen_commit_seconds_bucket" in texts[1]
