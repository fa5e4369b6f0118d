"""Prefix reuse as a run reports it: the metrics snapshot, the summary's line and the Prometheus counters."""

from __future__ import annotations

import io
from contextlib import redirect_stderr
from pathlib import Path

import httpx

from pipeline.engine.metrics import Metrics
from pipeline.engine.progress import Progress
from pipeline.engine.prometheus import Exporter


def _metrics() -> Metrics:
    metrics = Metrics(total=3)
    for same in (True, True, True, False):
        metrics.record_later_turn(same)
    return metrics


def test_the_summary_says_how_many_later_turns_reused_their_endpoint(tmp_path: Path) -> None:
    snap = {**_metrics().snapshot(), "endpoints": {}}
    assert (snap["later_turns"], snap["later_turns_same_endpoint"]) == (4, 3)
    err = io.StringIO()
    with redirect_stderr(err):
        Progress(enabled=False).print_summary(snap, tmp_path)
    assert "prefix reuse: 3/4 later turns on their conversation's endpoint (75.0%)" in err.getvalue()


def test_single_turn_runs_print_no_reuse_line(tmp_path: Path) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        Progress(enabled=False).print_summary({**Metrics(total=1).snapshot(), "endpoints": {}}, tmp_path)
    assert "prefix reuse" not in err.getvalue()


def test_prometheus_counts_later_turns() -> None:
    exporter = Exporter("127.0.0.1", 0)
    try:
        exporter.start()
        exporter.publish({**_metrics().snapshot(), "endpoints": {}})
        text = httpx.get(exporter.url, timeout=5).text
    finally:
        exporter.stop()
    assert 'regen_later_turns_total{worker="0"} 4.0' in text
    assert 'regen_later_turns_same_endpoint_total{worker="0"} 3.0' in text
