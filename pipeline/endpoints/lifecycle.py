"""An endpoint's life cycle: its five states and the events that move it between them, as one table.

    healthy ──failed──► degraded ──went_down──► down ──probe_passed──► degraded ──succeeded──► healthy
       └────────────────went_down──────────────┘
    any state ──retired──► retired (never again in this run)
    any state but draining ──drained──► draining (listed no more) ──listed_again──► down (probed before use)

- healthy: used; degraded: used, with recent failures (one more run of them opens the circuit); down: circuit open,
  no requests until a `/health` probe passes; draining: no new requests, in-flight ones finish; retired: never again.
- An event that does not apply to a state changes nothing (`next_state` says None): an endpoint already down stays
  on its probe schedule with the reason it went, and a retired one is not brought back by a late success.

The pool (`pool.py`) decides when each event happens and what else follows (cooldowns, ramps, logs); this module
only says where an event leads.
"""

from __future__ import annotations

from enum import StrEnum

HEALTHY, DEGRADED, DOWN, DRAINING, RETIRED = "healthy", "degraded", "down", "draining", "retired"
STATES = (HEALTHY, DEGRADED, DOWN, DRAINING, RETIRED)
LIVE = (HEALTHY, DEGRADED)


class Event(StrEnum):
    SUCCEEDED = "succeeded"  # a request got a response
    FAILED = "failed"  # a request failed for a reason that may be the endpoint's
    WENT_DOWN = "went_down"  # the circuit opens: failures in a row, a refused connect, failed probes, a hang
    PROBE_PASSED = "probe_passed"  # `/health` answered (and the gate's re-check passed)
    RETIRED = "retired"  # restarted with another configuration
    DRAINED = "drained"  # removed from the endpoints file
    LISTED_AGAIN = "listed_again"  # back in the endpoints file


TRANSITIONS: dict[tuple[str, Event], str] = {
    (DEGRADED, Event.SUCCEEDED): HEALTHY,
    (HEALTHY, Event.FAILED): DEGRADED,
    (DEGRADED, Event.FAILED): DEGRADED,
    (HEALTHY, Event.WENT_DOWN): DOWN,
    (DEGRADED, Event.WENT_DOWN): DOWN,
    (DOWN, Event.PROBE_PASSED): DEGRADED,
    (DRAINING, Event.LISTED_AGAIN): DOWN,
    **{(state, Event.RETIRED): RETIRED for state in STATES},
    **{(state, Event.DRAINED): DRAINING for state in STATES if state != DRAINING},
}


def next_state(state: str, event: Event) -> str | None:
    """Where `event` takes an endpoint in `state`; None when it does not apply (nothing changes)."""
    return TRANSITIONS.get((state, event))
