"""Samples of a server's state taken by a polling thread, as the saturation and queue-full tests take them.

A gap between two samples longer than `MAX_GAP_S` (the samplers poll every 20-55 ms) is the sampler's own thread
starved of CPU (CI runs three test processes on two cores), not the server or the pool: what happened in that gap
was not seen, so it is no evidence of an idle slot or a slow refill."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

MAX_GAP_S = 0.2


def dense_count(samples: Sequence[tuple[float, object]], max_gap: float = MAX_GAP_S) -> int:
    """How many samples followed the one before within `max_gap`: what a measure across samples can rest on."""
    return sum(b - a <= max_gap for (a, _), (b, _) in itertools.pairwise(samples))


def spaced(*spans: tuple[float, float, float, T]) -> list[tuple[float, T]]:
    """Synthetic samples: for each (start, stop, step, value), a sample of `value` every `step` seconds from start
    to before stop."""
    out: list[tuple[float, T]] = []
    for start, stop, step, value in spans:
        out += [(start + i * step, value) for i in range(round((stop - start) / step))]
    return out
