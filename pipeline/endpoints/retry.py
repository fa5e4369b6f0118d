"""Retry and back-off policies as values, and the pace of the endpoint control loops.

`RetryPolicy` spaces one prompt's attempts; `PushbackPolicy` spaces one endpoint's admissions while its server
pushes back (pushback.py). `control_interval_s` is the one pace of the loops that watch endpoints (probes of a down
endpoint, `/v1/loads` reads, the longest push-back hold), derived from `client.health_interval_s` so that a
run whose timeouts are all scaled down (tests, the soak benchmark) scales these with them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..config import ClientConfig

# The control loops' pace at real durations (health_interval_s = 10 s and more): a down server is probed, and an
# automatic endpoint resized, every 2 s. A longer health interval spares live servers SGLang's /health generation;
# it is no reason to notice a returning or idle server later.
CONTROL_MAX_S = 2.0
CONTROL_SHARE = 5  # ... and a fifth of the health interval below that


def control_interval_s(health_interval_s: float) -> float:
    """How often the endpoint control loops act: min(2 s, health_interval_s / 5); 2 s at the defaults."""
    return min(CONTROL_MAX_S, health_interval_s / CONTROL_SHARE)


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 0.5
    max_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay_for(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt number `attempt + 1` (attempt counts from 1).

        Full jitter (uniform in [0, min(cap, base * 2**(attempt-1))]) spreads retries of many prompts that failed
        together; a server's Retry-After is a floor, never shortened by jitter.
        """
        ceiling = min(self.max_s, self.base_s * (2 ** max(0, attempt - 1)))
        delay = self.rng.uniform(0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_s))
        return delay


@dataclass(frozen=True)
class PushbackPolicy:
    """How long an endpoint whose server pushed back (HTTP 503 "The request queue is full.", a router's 429 or
    408) admits no new request, and how long a probe must go unrefused before the push-back is over.

    `base_s` and `max_s` come from the client config (`for_client`): the retry backoff's base, and the smaller of
    its cap and the control interval, so a server that stops refusing is used again within one control interval.
    `retry_after_max_s` caps a server's Retry-After, like the retry policy does.
    """

    base_s: float = 0.5
    max_s: float = 2.0
    retry_after_max_s: float = 30.0

    @classmethod
    def for_client(cls, cfg: ClientConfig) -> PushbackPolicy:
        return cls(
            cfg.backoff_base_s, min(cfg.backoff_max_s, control_interval_s(cfg.health_interval_s)), cfg.backoff_max_s
        )

    def hold_for(self, level: int, retry_after: float | None = None) -> float:
        """Seconds to admit nothing new after the `level`-th push-back in a row (counting from 1).

        No hold after the first: one refusal from a full queue says the server holds what it can, not that it
        must be left alone; then base, 2 x base, ... up to `max_s`. A Retry-After is a floor (up to its cap).
        """
        hold = 0.0 if level <= 1 else min(self.max_s, self.base_s * 2 ** (level - 2))
        if retry_after is not None:
            hold = max(hold, min(retry_after, self.retry_after_max_s))
        return hold

    @property
    def calm_s(self) -> float:
        """How long a probe sent after a hold must go unrefused for the push-back to be over: a queue-full 503
        comes back at once (the scheduler refuses at admission), so one backoff base is ample."""
        return self.base_s


@dataclass
class Pushback:
    """One endpoint's push-back episode, driven by `pushback.py` with the pool clock's readings (no sleep in tests).

    The first refusal starts an episode: the endpoint holds `ceiling` requests (what it had in flight then, the
    level the server took) and admits one more request at once as a probe. Each further refusal of a probe holds
    admissions for `policy.hold_for(level)`, then admits one probe again. Refusals of requests admitted before the
    latest hold began (several can be on their way back together) tell nothing new and are only counted. A probe
    that goes unrefused for `policy.calm_s` ends the episode: `pushback.calm` restores the `ceiling`.
    """

    policy: PushbackPolicy = field(default_factory=PushbackPolicy)
    level: int = 0  # refusals that told something (the first, then each refused probe); 0: no episode
    ceiling: int = 0
    held_until: float = 0.0
    probe_at: float | None = None  # when the probe was admitted; None: none since the last refusal
    refusals: int = 0  # in this episode, probes or not
    holds: int = 0  # in this episode
    started_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.level > 0

    def refused(self, now: float, inflight: int, retry_after: float | None = None) -> float | None:
        """A refusal at `now` with `inflight` requests still out there: the hold it starts (0.0 for none), or
        None when it was a request admitted before the latest hold and changes nothing."""
        self.refusals = self.refusals + 1 if self.active else 1
        if self.active and (now < self.held_until or self.probe_at is None):
            return None
        if not self.active:
            self.ceiling, self.started_at, self.holds = max(1, inflight), now, 0
        self.level += 1
        hold = self.policy.hold_for(self.level, retry_after)
        self.held_until, self.probe_at = now + hold, None
        self.holds += int(hold > 0)
        return hold

    def may_admit(self, now: float) -> bool:
        """Outside an episode, always; in one, a single probe once the hold is over."""
        return not self.active or (now >= self.held_until and self.probe_at is None)

    def admitted(self, now: float) -> None:
        if self.active:
            self.probe_at = now

    def calm(self, now: float) -> bool:
        """True when the episode's probe has gone unrefused long enough: the episode is over (call `end`)."""
        return self.probe_at is not None and now - self.probe_at >= self.policy.calm_s

    def end(self) -> None:
        self.level, self.held_until, self.probe_at = 0, 0.0, None
