"""Push-back: what a server's refusal for load does to an endpoint's admissions and capacity.

A server that refuses a request for load (SGLang's 503 "The request queue is full.", a router's 429 or 408:
`state.PUSHBACK_STATUSES`) is live and full, not failing: the refusal never counts toward the circuit breaker
(`breaker.py`; the endpoint is marked down only when requests cannot connect or `/health` fails). The endpoint
pushes back instead, in an episode (`retry.Pushback`, paced by `retry.PushbackPolicy`): it admits one probe, then
nothing new for a hold that grows with each refused probe (Retry-After is a floor), and once a probe goes unrefused
it takes as many requests as it held when the refusals began, at once, then one more per success up to its
capacity (its ramp). An automatic endpoint (concurrency 0) also lowers its capacity to that level when a refusal
holds it, and the autosizer does not grow it back for a while (`refused_within`).

The pool (`pool.py`) calls these as it admits and releases requests, with its clock's readings, and looks at its
waiting workers again when a hold or a probe's calm period ends; this says what each refusal, probe and calm does.
"""

from __future__ import annotations

import logging

from ..errors import RequestError
from .lifecycle import LIVE
from .state import EndpointState

log = logging.getLogger("regen.endpoints")


def admits(ep: EndpointState, now: float, *, probe: bool) -> bool:
    """A request may go to `ep` at `now`: it is usable and, if it is pushing back, its probe is due and the request
    may be that probe (`probe`). An episode whose probe has gone unrefused long enough ends first (`calm`)."""
    calm(ep, now)
    if not ep.pushback.active:
        return ep.usable
    return probe and ep.usable and ep.pushback.may_admit(now)


def admitted(ep: EndpointState, now: float) -> float | None:
    """A request was admitted at `now`: if it is the episode's probe, the seconds after which, unrefused, it ends the
    episode (None outside an episode)."""
    if not ep.pushback.active:
        return None
    ep.pushback.admitted(now)
    return ep.pushback.policy.calm_s


def refused(ep: EndpointState, error: RequestError, now: float) -> float | None:
    """The server refused a request at `now` for load: the hold this starts, in seconds, or None when it holds
    nothing (a refusal of a request admitted before the last hold, the first refusal, or an endpoint not live)."""
    ep.errors += 1
    ep.pushbacks += 1
    if ep.state not in LIVE:
        return None
    ep.note_error(str(error), now)
    hold = ep.pushback.refused(now, ep.inflight, error.retry_after)
    if not hold:  # None: admitted before the last hold, nothing new; 0: the first refusal, probe at once
        return None
    # Refused again (or told to wait): the server is full at the level it held, not for one request.
    ep.pushed_back_at = now
    if ep.auto_capacity and ep.pushback.ceiling < ep.capacity:
        ep.capacity, ep.capacity_source = ep.pushback.ceiling, "lowered: the server refused more"
    if ep.pushback.holds == 1:
        log.info(
            "%s: pushing back (%s); one request at a time until it takes them again",
            ep.url, error, extra={"event": "endpoint_pushback", "url": ep.url, "why": str(error)},
        )  # fmt: skip
    return hold


def calm(ep: EndpointState, now: float) -> bool:
    """End the episode if its probe has gone unrefused long enough at `now`: the endpoint takes as many requests as
    it held when the refusals began, at once. True when it ended."""
    pb = ep.pushback
    if not (pb.active and pb.calm(now)):
        return False
    if pb.holds:
        log.info(
            "%s: taking requests again after %.1fs of push-back (%d refused)",
            ep.url, now - pb.started_at, pb.refusals,
            extra={"event": "endpoint_pushback_over", "url": ep.url, "refused": pb.refusals},
        )  # fmt: skip
    pb.end()
    ep.ramp_to(min(ep.limit, pb.ceiling))
    return True


def refused_within(ep: EndpointState, now: float, seconds: float) -> bool:
    """The server refused requests for load, enough to hold admissions, less than `seconds` before `now`."""
    return ep.pushed_back_at is not None and now - ep.pushed_back_at < seconds
