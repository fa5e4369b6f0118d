"""The endpoint pool: health state, circuit breaker, least-loaded choice, concurrency and rate limits.

Each endpoint is healthy, degraded (recent failures, still used), down (circuit open: no requests until a
`/health` probe passes), draining (listed no more; in-flight requests finish) or retired (never again); which
event moves it where is `lifecycle.py`'s table, and the pool says when each happens and what follows. A worker
asks the pool for a slot; the pool hands freed slots to waiting workers in order, retries before new prompts,
picking the endpoint with the fewest outstanding requests relative to its capacity.

Two waits are kept apart. Waiting for a free slot while endpoints are usable is the normal state of a saturated
pool and is never an error. Only time during which no endpoint is usable at all (every one down, draining or
retired) counts against `no_endpoint_timeout_s`.

A worker may name a preferred endpoint (`acquire(prefer=url)`): the one that served the previous turn of its
conversation, whose radix cache holds the conversation's history. It gets a slot there if the endpoint is live,
waiting up to `prefer_wait_s` for one ahead of the two lines (it can use no other endpoint's slot, and its wait is
bounded); then, or at once when that endpoint is down, draining or retired, it falls back to the least-loaded
choice like any other request.

An endpoint whose probe passes comes back half-open with a few slots (`ramp`) that grow by one per success, so a
server that answers `/health` but fails requests costs a few requests per probe, and a restarted one is full again
within a couple of request durations.

A server that refuses a request for load (SGLang's 503 "The request queue is full.", a router's 429 or 408) is
live and full, not failing: the refusal never counts toward the circuit breaker (the endpoint is marked down only
when requests cannot connect or `/health` fails). The endpoint pushes back instead (`retry.Pushback`): it admits
one probe, then nothing new for a hold that grows with each refused probe (Retry-After is a floor), and once a
probe goes unrefused it takes as many requests as it held when the refusals began, at once (an automatic endpoint
also lowers its capacity to that level, and the autosizer regrows it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from ..errors import EndpointError, RequestError
from .lifecycle import DOWN, LIVE, Event, next_state
from .retry import control_interval_s
from .state import PUSHBACK_STATUSES, RAMP_START, EndpointState

log = logging.getLogger("regen.endpoints")
POLL_S = 1.0  # how often a waiting worker re-checks the pool (state changes also wake it at once)


class Pool:
    """Endpoint selection and bookkeeping. `failure_threshold` consecutive failures open the circuit."""

    def __init__(
        self,
        endpoints: list[EndpointState],
        *,
        failure_threshold: int = 3,
        max_cooldown_s: float = 30.0,
        no_endpoint_timeout_s: float = 600.0,
        prefer_wait_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.endpoints = endpoints
        self.failure_threshold = failure_threshold
        self.max_cooldown_s = max_cooldown_s
        self.no_endpoint_timeout_s = no_endpoint_timeout_s
        self.prefer_wait_s = prefer_wait_s
        self.clock = clock
        self._retries: deque[asyncio.Future[EndpointState]] = deque()  # served first
        self._new: deque[asyncio.Future[EndpointState]] = deque()
        self._pinned: dict[str, deque[asyncio.Future[EndpointState | None]]] = {}  # by preferred url; served first
        self._unusable_since: float | None = None
        for ep in endpoints:
            ep.state_since = self.clock()
        self._note_liveness()

    # -- slots ---------------------------------------------------------------------------------------------------
    def _pick(self, probe: bool = True) -> EndpointState | None:
        best: EndpointState | None = None
        for ep in self.endpoints:
            if self._admits(ep, probe) and (best is None or ep.inflight / ep.capacity < best.inflight / best.capacity):
                best = ep
        return best

    def _admits(self, ep: EndpointState, probe: bool = True) -> bool:
        """A request may go to `ep` now: it is usable and, if it is pushing back, its probe is due and the request
        may be that probe (`probe`)."""
        if ep.pushback.active and ep.pushback.calm(self.clock()):  # (also checked on release)
            self._calmed(ep)
        if not ep.pushback.active:
            return ep.usable
        return probe and ep.usable and ep.pushback.may_admit(self.clock())

    def _probe_for_retries(self) -> bool:
        """Whether a retry may be a pushing-back endpoint's probe: only when no new prompt waits to be it. A probe
        is likely refused, and a refusal uses one of the prompt's attempts: a retry has already used some."""
        return all(fut.done() for fut in self._new)

    def _admit(self, ep: EndpointState) -> EndpointState:
        ep.inflight += 1
        if ep.pushback.active:  # the probe: waiting workers get another look once its calm period is over
            ep.pushback.admitted(self.clock())
            self._wake_in(ep.pushback.policy.calm_s)
        return ep

    async def acquire(self, *, retry: bool = False, prefer: str | None = None) -> EndpointState:
        """A slot on the least-loaded usable endpoint, waiting in line (retries ahead of new prompts); with
        `prefer`, a slot on that endpoint if it is live and one frees within `prefer_wait_s`.

        Raises EndpointError only when no endpoint has been usable for `no_endpoint_timeout_s`.
        """
        home = self._home(prefer)
        ep = None if home is None else await self._take_home(home)
        if ep is None:
            ep = self._take_now(retry)
        if ep is None:
            ep = await self._wait(self._retries if retry else self._new)
        if ep.throttler is not None:
            try:
                async with ep.throttler:
                    pass
            except asyncio.CancelledError:
                await asyncio.shield(self.release(ep, unused=True))
                raise
        return ep

    def _home(self, url: str | None) -> EndpointState | None:
        """The preferred endpoint, if it is live (a down, draining or retired one hands its conversations on)."""
        if url is None:
            return None
        return next((ep for ep in self.endpoints if ep.url == url and ep.state in LIVE), None)

    async def _take_home(self, home: EndpointState) -> EndpointState | None:
        """A slot on `home`, now or within `prefer_wait_s`; None when none came (or it stopped being live)."""
        line = self._pinned.setdefault(home.url, deque())
        if self._admits(home, probe=False) and not line:
            return self._admit(home)
        if self.prefer_wait_s <= 0:
            return None
        fut: asyncio.Future[EndpointState | None] = asyncio.get_running_loop().create_future()
        line.append(fut)
        try:
            await asyncio.wait({fut}, timeout=self.prefer_wait_s)
            return fut.result() if fut.done() else None
        except BaseException:
            if fut.done() and not fut.cancelled() and (ep := fut.result()) is not None:
                ep.inflight -= 1  # handed a slot as we were leaving: give it back
                self._wake()
            raise
        finally:
            fut.cancel()
            if fut in line:
                line.remove(fut)

    def _take_now(self, retry: bool) -> EndpointState | None:
        """A free slot, unless someone who must go first is already waiting."""
        if self._retries or (not retry and self._new):
            return None
        ep = self._pick(probe=not retry or self._probe_for_retries())
        return None if ep is None else self._admit(ep)

    async def _wait(self, line: deque[asyncio.Future[EndpointState]]) -> EndpointState:
        fut: asyncio.Future[EndpointState] = asyncio.get_running_loop().create_future()
        line.append(fut)
        try:
            while True:
                done, _ = await asyncio.wait({fut}, timeout=self._poll_s())
                if done:
                    return fut.result()
                if self.unusable_for() >= self.no_endpoint_timeout_s:
                    raise EndpointError(f"no usable endpoint for {self.no_endpoint_timeout_s:.0f}s: {self.describe()}")
                self._wake()  # capacity may have grown without a notify
        except BaseException:
            if fut.done() and not fut.cancelled():  # handed a slot as we were leaving: give it back
                fut.result().inflight -= 1
                self._wake()
            fut.cancel()
            if fut in line:
                line.remove(fut)
            raise

    def _poll_s(self) -> float:
        if self._unusable_since is None:
            return POLL_S
        return max(0.001, min(POLL_S, self.no_endpoint_timeout_s - self.unusable_for()))

    def _wake(self) -> None:
        """Hand free slots to waiting workers: those waiting for their own endpoint first (they can use no other),
        then retries, then new prompts, each line in order (a pushing-back endpoint's probe goes to a new prompt
        when one waits)."""
        self._note_liveness()
        self._wake_pinned()
        self._serve(self._retries, probe=self._probe_for_retries())
        self._serve(self._new, probe=True)
        if self._probe_for_retries():
            self._serve(self._retries, probe=True)

    def _serve(self, line: deque[asyncio.Future[EndpointState]], *, probe: bool) -> None:
        while line:
            if line[0].done():  # its worker left (cancelled)
                line.popleft()
                continue
            ep = self._pick(probe)
            if ep is None:
                return
            line.popleft().set_result(self._admit(ep))

    def _wake_pinned(self) -> None:
        for ep in self.endpoints:
            line = self._pinned.get(ep.url)
            while line:
                if line[0].done():  # its worker left (cancelled, or its wait ran out)
                    line.popleft()
                elif ep.state not in LIVE:  # down, draining or retired: fall back to any endpoint now
                    line.popleft().set_result(None)
                elif self._admits(ep, probe=False):  # its probe goes to a prompt that can go elsewhere
                    line.popleft().set_result(self._admit(ep))
                else:
                    break

    async def notify(self) -> None:
        """Something changed (capacity, state): give waiting workers the slots that may now be free."""
        self._wake()

    async def release(
        self,
        ep: EndpointState,
        *,
        latency: float | None = None,
        error: RequestError | None = None,
        unused: bool = False,
    ) -> None:
        """Give a slot back, recording the outcome (`unused`: nothing was learned about the endpoint)."""
        ep.inflight -= 1
        if unused:
            pass
        elif error is None:
            self._succeeded(ep, latency)
        elif error.status in PUSHBACK_STATUSES:
            self._pushed_back(ep, error)
        else:
            self._failed(ep, str(error))
        if ep.pushback.active and ep.pushback.calm(self.clock()):
            self._calmed(ep)
        self._wake()

    def _succeeded(self, ep: EndpointState, latency: float | None) -> None:
        ep.ok += 1
        ep.consecutive_failures = 0
        ep.cooldown_s = 1.0
        ep.last_ok_at = self.clock()
        self._move(ep, Event.SUCCEEDED)
        if ep.ramp:
            ep.ramp = 0 if ep.ramp + 1 >= ep.capacity else ep.ramp + 1
        if latency is not None:
            ep.latencies.append(latency)
            if len(ep.latencies) > 512:
                del ep.latencies[:256]

    def _failed(self, ep: EndpointState, why: str) -> None:
        ep.errors += 1
        ep.consecutive_failures += 1
        if next_state(ep.state, Event.FAILED):  # once down or retired, the reason it went stays its last error
            self._error(ep, why)
            self._move(ep, Event.FAILED)
            if ep.consecutive_failures >= self.failure_threshold:
                self.mark_down(ep, why)

    def _pushed_back(self, ep: EndpointState, error: RequestError) -> None:
        """The server refused for load: it is live. Admit less there (see the module docstring), never mark it down."""
        ep.errors += 1
        ep.pushbacks += 1
        if ep.state not in LIVE:
            return
        self._error(ep, str(error))
        hold = ep.pushback.refused(self.clock(), ep.inflight, error.retry_after)
        if not hold:  # None: admitted before the last hold, nothing new; 0: the first refusal, probe at once
            return
        # Refused again (or told to wait): the server is full at the level it held, not for one request.
        ep.pushed_back_at = self.clock()
        if ep.auto_capacity and ep.pushback.ceiling < ep.capacity:
            ep.capacity, ep.capacity_source = ep.pushback.ceiling, "lowered: the server refused more"
        if ep.pushback.holds == 1:
            log.info(
                "%s: pushing back (%s); one request at a time until it takes them again",
                ep.url, error, extra={"event": "endpoint_pushback", "url": ep.url, "why": str(error)},
            )  # fmt: skip
        self._wake_in(hold)

    def _calmed(self, ep: EndpointState) -> None:
        """Its probe went unrefused: take as many requests as it held when the refusals began, at once."""
        pb = ep.pushback
        if pb.holds:
            log.info(
                "%s: taking requests again after %.1fs of push-back (%d refused)",
                ep.url, self.clock() - pb.started_at, pb.refusals,
                extra={"event": "endpoint_pushback_over", "url": ep.url, "refused": pb.refusals},
            )  # fmt: skip
        pb.end()
        level = min(ep.limit, pb.ceiling)
        ep.ramp = level if level < ep.capacity else 0

    def _wake_in(self, delay_s: float) -> None:
        """Look at the waiting workers again when a hold or a probe's calm period ends (no request ends it)."""
        try:
            asyncio.get_running_loop().call_later(delay_s + 0.001, self._wake)
        except RuntimeError:  # no loop (a synchronous caller): the next acquire or release looks
            pass

    # -- states --------------------------------------------------------------------------------------------------
    def _move(self, ep: EndpointState, event: Event) -> bool:
        """Apply `event` to `ep` (`lifecycle.TRANSITIONS`); False when it does not apply there."""
        state = next_state(ep.state, event)
        if state is None:
            return False
        if ep.state != state:
            ep.state, ep.state_since = state, self.clock()
        self._note_liveness()
        return True

    def _error(self, ep: EndpointState, why: str) -> None:
        ep.last_error, ep.last_error_at = why, self.clock()

    def _note_liveness(self) -> None:
        if any(ep.state in LIVE for ep in self.endpoints):
            self._unusable_since = None
        elif self._unusable_since is None:
            self._unusable_since = self.clock()

    def unusable_for(self) -> float:
        """Seconds during which no endpoint has been usable (down, draining or retired); 0 while one is."""
        self._note_liveness()
        return 0.0 if self._unusable_since is None else self.clock() - self._unusable_since

    def mark_down(self, ep: EndpointState, why: str) -> None:
        """Open the circuit: probe again after a cooldown that doubles each time it opens (up to the max).

        An endpoint already down stays on its schedule and keeps its reason: the requests it had in flight fail
        one by one when it goes, and each of them must not push its next probe further away.
        """
        if not self._move(ep, Event.WENT_DOWN):
            return
        self._error(ep, why)
        log.warning("%s: down (%s)", ep.url, why, extra={"event": "endpoint_down", "url": ep.url, "why": why})
        ep.ramp = 0
        ep.pushback.end()
        # The first probe: after the cooldown, but within the control interval (the monitor's longest wait)
        ep.down_until = self.clock() + min(ep.cooldown_s, control_interval_s(ep.client.cfg.health_interval_s))
        ep.cooldown_s = min(self.max_cooldown_s, ep.cooldown_s * 2)
        self._wake_pinned()  # its conversations go elsewhere now

    def probe_failed(self, ep: EndpointState, why: str, *, max_wait_s: float) -> None:
        """A probe of a down endpoint failed: probe again after its cooldown, at most `max_wait_s` from now."""
        if ep.state != DOWN:
            return
        self._error(ep, why)
        ep.down_until = self.clock() + min(ep.cooldown_s, max_wait_s)
        ep.cooldown_s = min(self.max_cooldown_s, ep.cooldown_s * 2)

    def probe_missed(self, ep: EndpointState, why: str, in_a_row: int) -> None:
        """A live endpoint failed `in_a_row` probes (not yet enough to declare it down): say so in reports."""
        ep.probe_failures = in_a_row
        self._error(ep, why)

    def mark_up(self, ep: EndpointState) -> None:
        """A probe passed: half-open the circuit (degraded; one more failure opens it again), then ramp up."""
        if self._move(ep, Event.PROBE_PASSED):
            log.info("%s: up again, back in the pool", ep.url, extra={"event": "endpoint_up", "url": ep.url})
            ep.consecutive_failures = self.failure_threshold - 1
            ep.down_until = 0.0
            ep.probe_failures = 0
            start = max(1, ep.capacity // RAMP_START)
            ep.ramp = start if start < ep.capacity else 0
            self._wake()

    def due_for_probe(self) -> list[EndpointState]:
        now = self.clock()
        return [ep for ep in self.endpoints if ep.state == DOWN and ep.down_until <= now]

    def kill(self, ep: EndpointState, why: str) -> int:
        """The endpoint is hung: mark it down and cancel its in-flight requests (they retry elsewhere)."""
        self.mark_down(ep, why)
        ep.kills += 1
        tasks = list(ep.tasks)
        for task in tasks:
            task.cancel(msg="endpoint-down")
        return len(tasks)

    def retire(self, ep: EndpointState, why: str) -> None:
        """Never use this endpoint again in this run (its configuration is not the one that was checked)."""
        self._move(ep, Event.RETIRED)
        self._error(ep, why)
        log.warning("%s: retired for this run: %s", ep.url, why, extra={"event": "endpoint_retired", "url": ep.url})
        self._wake_pinned()

    def add(self, ep: EndpointState) -> None:
        ep.state_since = self.clock()
        self.endpoints.append(ep)
        self._wake()

    def drain(self, ep: EndpointState) -> None:
        """Take no new requests; in-flight ones finish."""
        self._move(ep, Event.DRAINED)
        log.info(
            "%s: draining (in-flight requests finish)", ep.url, extra={"event": "endpoint_draining", "url": ep.url}
        )
        self._wake_pinned()

    def undrain(self, ep: EndpointState) -> None:
        """A drained endpoint was listed again: probe it before use."""
        self._move(ep, Event.LISTED_AGAIN)
        ep.down_until, ep.cooldown_s = 0.0, 1.0

    def pushed_back_within(self, ep: EndpointState, seconds: float) -> bool:
        """The server refused requests for load, enough to hold admissions, less than `seconds` ago."""
        return ep.pushed_back_at is not None and self.clock() - ep.pushed_back_at < seconds

    # -- reports -------------------------------------------------------------------------------------------------
    def describe(self) -> str:
        """Each endpoint's real state, load, and last success and error with their ages (for exit messages)."""
        return "; ".join(self._describe(ep) for ep in self.endpoints)

    def _describe(self, ep: EndpointState) -> str:
        head = f"{ep.url} {ep.state}" + (f" for {self._age(ep.state_since)}" if ep.state_since is not None else "")
        parts = []
        if ep.state in LIVE and ep.probe_failures:
            parts.append(f"not answering /health: {ep.probe_failures} probes failed in a row")
        if ep.state == DOWN:
            parts.append(f"next probe in {max(0.0, ep.down_until - self.clock()):.0f}s")
        if ep.state in LIVE and ep.pushback.active:
            parts.append(f"pushing back: {ep.pushback.refusals} refused in {self._age(ep.pushback.started_at)}")
        parts.append(f"{ep.inflight}/{ep.limit} in flight")
        parts.append(f"last success {self._age(ep.last_ok_at)} ago" if ep.last_ok_at is not None else "no success yet")
        if ep.last_error:
            when = f" {self._age(ep.last_error_at)} ago" if ep.last_error_at is not None else ""
            parts.append(f"last error{when}: {ep.last_error}")
        return f"{head} ({', '.join(parts)})"

    def _age(self, since: float | None) -> str:
        return f"{max(0.0, self.clock() - since):.0f}s" if since is not None else "?"

    def snapshot(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for ep in self.endpoints:
            lat = sorted(ep.latencies)
            out[ep.url] = {
                "state": ep.state,
                "inflight": ep.inflight,
                "capacity": ep.capacity,
                "limit": ep.limit,
                "capacity_source": ep.capacity_source,
                "ok": ep.ok,
                "errors": ep.errors,
                "pushbacks": ep.pushbacks,
                "latency_p50": lat[len(lat) // 2] if lat else None,
                "latency_p95": lat[int(len(lat) * 0.95)] if lat else None,
                "last_error": ep.last_error,
            }
        return out
