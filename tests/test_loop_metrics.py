"""Loops as a run reports them: the metrics snapshot, the summary line and the Prometheus counters; and the stream
guard's parse of SSE bytes as they arrive."""

from __future__ import annotations

import io
from contextlib import redirect_stderr
from pathlib import Path

import httpx
import orjson
import pytest

from pipeline.endpoints.loop_guard import CHECK_BYTES, LoopStopped, StreamGuard, _events
from pipeline.engine.metrics import Metrics
from pipeline.engine.progress import Progress
from pipeline.engine.prometheus import Exporter


def _metrics() -> Metrics:
    metrics = Metrics(total=10)
    metrics.record_looping(stopped=True, streamed_tokens=1000, max_tokens=32768)
    metrics.record_looping(stopped=True, streamed_tokens=2000, max_tokens=32768)
    metrics.record_looping(stopped=False, streamed_tokens=32768, max_tokens=32768)  # ran to the end (guard off)
    return metrics


def test_the_snapshot_and_the_summary_count_loops(tmp_path: Path) -> None:
    snap = {**_metrics().snapshot(), "endpoints": {}}
    assert snap["loops"] == {"looping": 3, "stopped": 2, "tokens_saved": 31768 + 30768}
    err = io.StringIO()
    with redirect_stderr(err):
        Progress(enabled=False).print_summary(snap, tmp_path)
    assert "loops: 3 looping completions resampled, 2 stopped early (62,536 output tokens not generated)" in (
        err.getvalue()
    )
    quiet = io.StringIO()
    with redirect_stderr(quiet):
        Progress(enabled=False).print_summary({**Metrics(total=1).snapshot(), "endpoints": {}}, tmp_path)
    assert "loops:" not in quiet.getvalue()


def test_prometheus_counts_loops() -> None:
    exporter = Exporter("127.0.0.1", 0)
    try:
        exporter.start()
        exporter.publish({**_metrics().snapshot(), "endpoints": {}})
        text = httpx.get(exporter.url, timeout=5).text
    finally:
        exporter.stop()
    assert 'regen_looping_completions_total{worker="0"} 3.0' in text
    assert 'regen_loops_stopped_total{worker="0"} 2.0' in text
    assert 'regen_loop_tokens_saved_total{worker="0"} 62536.0' in text


def _event(**delta: str) -> bytes:
    chunk = {"id": "r", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}  # fmt: skip
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _feed(guard: StreamGuard, body: bytes, piece: int = 700) -> None:
    for i in range(0, len(body), piece):
        guard.take(body[i : i + piece])


def test_the_stream_guard_stops_a_looping_stream_and_keeps_what_streamed() -> None:
    unit = "Wait, I should double-check the parity argument once more before answering. "
    words = [w + " " for w in ("Let me set up the problem first. " + unit * 200).split(" ") if w]
    body = b"".join(_event(reasoning_content=w) for w in words)
    guard = StreamGuard()
    with pytest.raises(LoopStopped) as stopped:
        _feed(guard, body)
    assert stopped.value.loop.period == len(unit)
    partial = guard.partial(stopped.value)
    assert partial.finish_reason == "abort" and partial.content == "" and partial.model == "m"
    assert partial.reasoning is not None and partial.reasoning.startswith("Let me set up")
    assert len(partial.reasoning) < 8000 + 2 * len(unit) + 1500  # loops.GUARD_REPEAT past the first copies
    assert partial.loop is stopped.value.loop and partial.loop_detail.startswith("reasoning loops from char 31")


def test_the_stream_guard_lets_ordinary_text_and_answers_through() -> None:
    text = " ".join(f"step {i}: the sum so far is {i * (i + 1) // 2}." for i in range(2000))
    body = b"".join(_event(reasoning_content=text[i : i + 12]) for i in range(0, len(text), 12))
    body += b"".join(_event(content=text[i : i + 12]) for i in range(0, 5000, 12))
    guard = StreamGuard()
    _feed(guard, body + b"data: [DONE]\n\n")
    assert len(body) > 10 * CHECK_BYTES and guard.reasoning.chars > 30000 and guard.answer.chars > 4000


def test_a_stream_read_in_one_piece_is_parsed_and_guarded_closing_frame_and_all() -> None:
    # A fast server's whole stream often arrives in one read, `data: [DONE]` included.
    unit = "Wait, I should double-check the parity argument once more before answering. "
    body = b"".join(_event(reasoning_content=w + " ") for w in ("Let me start. " + unit * 200).split(" ") if w)
    whole = body + b"data: [DONE]\n\n"
    expected = [orjson.loads(frame[6:]) for frame in body.split(b"\n\n") if frame]
    assert _events(whole[: whole.rfind(b"\n\n")]) == expected
    assert _events(b"data: [DONE]") == []
    with pytest.raises(LoopStopped) as stopped:
        StreamGuard().take(whole)
    assert stopped.value.loop.period == len(unit)


def test_the_stream_guard_reads_frames_a_gateway_ends_with_crlf() -> None:
    unit = "Wait, I should double-check the parity argument once more before answering. "
    words = [w + " " for w in ("Let me set up the problem first. " + unit * 200).split(" ") if w]
    body = b"".join(_event(reasoning_content=w).replace(b"\n", b"\r\n") for w in words)
    guard = StreamGuard()
    with pytest.raises(LoopStopped) as stopped:
        _feed(guard, body)
    assert stopped.value.loop.period == len(unit)
    assert (guard.partial(stopped.value).reasoning or "").startswith("Let me set up")
