"""engine/progress.py: the bar counts what was generated, up to what this invocation will do, by endpoint name."""

from __future__ import annotations

import io

from pipeline.engine.metrics import Metrics
from pipeline.engine.progress import Progress


def _snap(**over: object) -> dict:
    endpoints = {"http://gpu-node-01:30000": {"inflight": 16}, "http://gpu-node-02:30000": {"inflight": 3}}
    return {**Metrics(total=283).snapshot(), "endpoints": endpoints, **over}


def test_the_bar_leaves_out_bad_input_and_names_endpoints_by_host() -> None:
    out = io.StringIO()
    with Progress(file=out) as progress:
        progress.update(_snap(done=159, accepted=9, rejected=150, rejected_by_reason={"bad_input": 150}))
        assert progress.bar is not None and (progress.bar.n, progress.bar.total) == (9, 133)
    assert "inflight=gpu-node-01:30000:16 gpu-node-02:30000:3" in out.getvalue()
    assert "inflight=0:16" not in out.getvalue()


def test_the_bar_total_is_what_limit_lets_this_invocation_do() -> None:
    with Progress(file=io.StringIO(), limit=20) as progress:
        progress.update(_snap(already_done=100, done=5, accepted=5))
        assert progress.bar is not None and (progress.bar.n, progress.bar.total) == (105, 120)
