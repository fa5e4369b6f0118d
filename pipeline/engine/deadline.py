"""Hung requests: a per-request deadline that follows what each endpoint actually delivers.

A non-streaming request shows no progress until it ends, and a server can hold one forever while `/health` stays
200 and every other request completes. `request_timeout_s` (an hour by default) is far too long to wait for the
tail of a run, and a fixed short timeout would kill real 30K-token thinking requests. So each endpoint's deadline
is derived from its own completed requests:

    deadline = max(client.hang_floor_s, client.hang_slack * max_tokens / slow_rate)

where `slow_rate` is a low quantile (the 10th percentile) of the output tokens per second of the endpoint's
recent completions (latency includes queueing and prefill, so the rate errs slow and the deadline long). A request
can never produce more than `max_tokens`, so at the endpoint's slow rate it needs at most `max_tokens / slow_rate`
seconds; the slack covers a server that slows down under load. Until an endpoint has `MIN_SAMPLES` completions
(start of a run) there is no evidence, and only `request_timeout_s` applies.

With the defaults (floor 600 s, slack 3) and Qwen3.6-27B at ~50 tok/s per request with max_tokens 32768, a hung
request is given up after ~33 minutes instead of an hour; at the scaled durations of the tests, after a few seconds.
`Dispatcher.watch_hangs` compares every request in flight with its endpoint's current deadline about once a second,
so a request sent before any rate was known is held to the deadline learned since. One past it is aborted on the
server (`/abort_request` with its rid) and retried elsewhere without using the prompt's attempts (it counts toward
`client.max_endpoint_failures`).
"""

from __future__ import annotations

from collections import deque

MIN_SAMPLES = 8
WINDOW = 256
QUANTILE = 10
RECOMPUTE = 16


class Deadlines:
    def __init__(self, *, floor_s: float, slack: float, ceiling_s: float) -> None:
        self.floor_s = floor_s
        self.slack = slack
        self.ceiling_s = ceiling_s  # request_timeout_s: the deadline never exceeds it
        self._rates: dict[str, deque[float]] = {}
        self._slow: dict[str, float] = {}  # the quantile, recomputed every RECOMPUTE observations (not per request)
        self._seen: dict[str, int] = {}  # observations per endpoint (the window stops growing at WINDOW)

    def observe(self, url: str, tokens: int | None, latency_s: float) -> None:
        """A completed request: its output tokens per second of wall time on that endpoint."""
        if not tokens or latency_s <= 0:
            return
        rates = self._rates.setdefault(url, deque(maxlen=WINDOW))
        rates.append(tokens / latency_s)
        self._seen[url] = seen = self._seen.get(url, 0) + 1
        # By the count, not len(rates): a full window's length stays a multiple of RECOMPUTE, so that test was true on
        # every completion once 256 had been seen (a numpy percentile per request: 17% of the client's CPU).
        if len(rates) >= MIN_SAMPLES and (url not in self._slow or seen % RECOMPUTE == 0):
            self._slow[url] = _percentile(sorted(rates), QUANTILE)

    def for_request(self, url: str, max_tokens: int) -> float:
        """Seconds a request to `url` may take before it counts as hung."""
        slow = self._slow.get(url)
        if slow is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, self.slack * max_tokens / slow))


def _percentile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) percentile of sorted values, without numpy's ~100 µs of call overhead."""
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
