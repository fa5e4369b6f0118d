"""The circuit breaker: failures in a row open an endpoint's circuit; a probe that passes half-opens it.

A request failure that may be the endpoint's (not a refusal for load: `pushback.py`) lengthens its failure streak,
and any response ends the streak; `failure_threshold` failures in a row open the circuit (the pool marks the
endpoint down, `lifecycle.py`). An open circuit is probed (`/health`, `health.py`) after its cooldown: 1 s, doubled
each time the circuit opens or a probe fails, up to `max_cooldown_s`, and never later than the control interval
after it opened (`retry.control_interval_s`), so a server that comes straight back is used again within seconds.
A probe that passes half-opens the circuit: the endpoint is degraded with `failure_threshold - 1` failures on its
streak (one more opens it again) and a few slots (`capacity // RAMP_START`, at least one) that grow by one per
success, so a server that answers `/health` but fails requests costs a few requests per probe, and a restarted one
is full again within a couple of request durations.

The pool decides when each of these happens (and logs it); this keeps the numbers. Times are readings of the
pool's clock, so tests need no sleep.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lifecycle import DOWN
from .retry import control_interval_s
from .state import EndpointState

RAMP_START = 4  # a half-open endpoint starts with capacity / RAMP_START slots (at least one)
FIRST_COOLDOWN_S = 1.0


@dataclass(frozen=True)
class Breaker:
    failure_threshold: int = 3
    max_cooldown_s: float = 30.0

    def succeeded(self, ep: EndpointState) -> None:
        """A response came back: the failure streak and the cooldown start over."""
        ep.consecutive_failures = 0
        ep.cooldown_s = FIRST_COOLDOWN_S

    def failed(self, ep: EndpointState) -> bool:
        """One more failure in a row; True when the streak is long enough to open the circuit."""
        ep.consecutive_failures += 1
        return ep.consecutive_failures >= self.failure_threshold

    def opened(self, ep: EndpointState, now: float) -> None:
        """The circuit opened at `now`: no slots; the first probe after the cooldown, within the control interval."""
        ep.ramp = 0
        self.probe_failed(ep, now, max_wait_s=control_interval_s(ep.client.cfg.health_interval_s))

    def probe_failed(self, ep: EndpointState, now: float, *, max_wait_s: float) -> None:
        """Probe again after the cooldown (at most `max_wait_s` from `now`), and double the cooldown for the next."""
        ep.down_until = now + min(ep.cooldown_s, max_wait_s)
        ep.cooldown_s = min(self.max_cooldown_s, ep.cooldown_s * 2)

    def half_opened(self, ep: EndpointState) -> None:
        """A probe passed: one more failure opens the circuit again; a few slots, growing by one per success."""
        ep.consecutive_failures = self.failure_threshold - 1
        ep.down_until = 0.0
        ep.probe_failures = 0
        ep.ramp_to(max(1, ep.capacity // RAMP_START))

    def probe_at_once(self, ep: EndpointState) -> None:
        """Probe before any use, now, on a fresh cooldown (a drained endpoint listed again)."""
        ep.down_until, ep.cooldown_s = 0.0, FIRST_COOLDOWN_S

    def due(self, ep: EndpointState, now: float) -> bool:
        """Its circuit is open and its next probe is due."""
        return ep.state == DOWN and ep.down_until <= now
