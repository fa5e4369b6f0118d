"""Learned deadlines: the slow quantile follows each endpoint's recent completions, recomputed every RECOMPUTE."""

from __future__ import annotations

import pytest

from pipeline.engine.deadline import RECOMPUTE, WINDOW, Deadlines


def test_the_quantile_is_recomputed_every_recompute_observations_also_past_a_full_window() -> None:
    d = Deadlines(floor_s=0.0, slack=1.0, ceiling_s=1e9)
    seen = 2 * WINDOW  # a full window, at a multiple of RECOMPUTE
    for _ in range(seen):
        d.observe("a", 1000, 10.0)  # 100 tok/s
    assert d.for_request("a", 1000) == 10.0
    slow = RECOMPUTE * 2 - 2  # enough slow ones to move the 10th percentile, ending just before a recompute
    for _ in range(slow):
        d.observe("a", 10, 10.0)  # 1 tok/s
    assert (seen + slow) % RECOMPUTE != 0
    assert d.for_request("a", 1000) == 10.0  # not yet: recomputing on every completion cost 17% of the client's CPU
    for _ in range(RECOMPUTE - (seen + slow) % RECOMPUTE):
        d.observe("a", 10, 10.0)
    assert d.for_request("a", 1000) == 1000.0  # at the next multiple it follows the slow requests


def test_the_percentile_is_numpys_linear_one() -> None:
    import random

    import numpy as np

    from pipeline.engine.deadline import _percentile

    rng = random.Random(3)
    for n in (1, 2, 8, 255, 256):
        values = [rng.uniform(1, 500) for _ in range(n)]
        assert _percentile(sorted(values), 10) == pytest.approx(float(np.percentile(values, 10)))
