"""Seeded uniform samples of a stream that merge: what lets `regen audit` judge blocks apart (dataset/audit.py)
and still report the examples and length percentiles one pass over all rows would.

`Examples` keeps up to k examples per reason, `Reservoir` a fixed-size sample of numbers with their exact count,
mean and max; both cost the same memory at 1K or 1M rows, and the same data and seed give the same result.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

PERCENTILES = (1, 10, 50, 90, 99)


class Examples:
    """Up to `k` examples per reason, a uniform choice among all (reservoir sampling, seeded): the same data and
    seed give the same examples. An example's text is built only when it is kept. Two reservoirs merge into one
    of the union: how many come from each side follows the hypergeometric law, drawn with this one's generator."""

    def __init__(self, rng: random.Random, k: int) -> None:
        self.rng = rng
        self.k = k
        self.seen: Counter[str] = Counter()
        self.kept: dict[str, list[dict[str, Any]]] = {}

    def offer(self, reason: str, example: Any) -> None:
        self.seen[reason] += 1
        kept = self.kept.setdefault(reason, [])
        if len(kept) < self.k:
            kept.append(example() if callable(example) else example)
        elif (j := self.rng.randrange(self.seen[reason])) < self.k:
            kept[j] = example() if callable(example) else example

    def merge(self, other: Examples, place: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Take in a later block's reservoir, each of its examples as `place` renumbers it for the whole input."""
        for reason, n in other.seen.items():
            theirs = [place(ex) for ex in other.kept[reason]]
            mine, m = self.kept.setdefault(reason, []), self.seen[reason]
            take, a, b = 0, m, n
            for _ in range(min(self.k, m + n)):  # draws without replacement from the two populations
                if self.rng.randrange(a + b) < a:
                    take, a = take + 1, a - 1
                else:
                    b -= 1
            rest = min(self.k, m + n) - take
            self.kept[reason] = self.rng.sample(mine, take) + self.rng.sample(theirs, rest)
            self.seen[reason] += n

    def chosen(self) -> dict[str, list[dict[str, Any]]]:
        return {reason: self.kept[reason] for reason in sorted(self.kept)}


class Reservoir:
    """Exact count, mean and max, and a uniform sample of at most `size` values for percentiles (Algorithm R,
    vectorised per chunk, seeded), so a length distribution costs the same memory at 1K or 1M turns."""

    def __init__(self, seed: int, size: int = 100_000) -> None:
        self.rng = np.random.default_rng(seed)
        self.size = size
        self.values = np.empty(size, dtype=np.float64)
        self.seen = 0
        self.total = 0.0
        self.max = 0.0

    def extend(self, chunk: Sequence[float]) -> None:
        if not chunk:
            return
        x = np.asarray(chunk, dtype=np.float64)
        self.total += float(x.sum())
        self.max = max(self.max, float(x.max()))
        free = max(0, min(len(x), self.size - self.seen))
        self.values[self.seen : self.seen + free] = x[:free]
        if free < len(x):
            slots = self.rng.integers(0, np.arange(self.seen + free, self.seen + len(x)) + 1)
            keep = slots < self.size
            self.values[slots[keep]] = x[free:][keep]
        self.seen += len(x)

    def sample(self) -> np.ndarray:
        return self.values[: min(self.seen, self.size)]

    def percentiles(self) -> dict[str, float | None]:
        if not self.seen:
            return {"count": 0, **{f"p{q}": None for q in PERCENTILES}, "mean": None, "max": None}
        qs = np.percentile(self.sample(), PERCENTILES)
        out: dict[str, float | None] = {"count": self.seen}
        out.update({f"p{q}": float(v) for q, v in zip(PERCENTILES, qs, strict=True)})
        out.update(mean=self.total / self.seen, max=self.max)
        return out

    def histogram(self, bins: int = 40) -> dict[str, list[Any]]:
        sample = self.sample()
        if not sample.size:
            return {"edges": [], "counts": []}
        # Lengths start at 0: the bins span 0..max (0..1 when every length is 0, where numpy's default of
        # min-0.5..max+0.5 would draw a negative length).
        counts, edges = np.histogram(sample, bins=bins, range=(0, float(sample.max()) or 1.0))
        scale = self.seen / sample.size  # a sampled histogram, scaled back to the number of turns
        return {"edges": edges.tolist(), "counts": (counts * scale).round().astype(int).tolist()}  # whole turns
