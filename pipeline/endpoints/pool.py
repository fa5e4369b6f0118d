"""The endpoint pool: slots on the endpoints, handed to waiting workers, and the events that change them.

A worker asks the pool for a slot; the pool hands freed slots to waiting workers in order, retries before new
prompts, picking the endpoint with the fewest outstanding requests relative to its capacity, within its rate limit.
When a request ends the pool records its outcome and says which event it is: which state that leads to is
`lifecycle.py`'s table (healthy, degraded, down, draining, retired), when failures open the circuit and when it is
probed again is the breaker's (`breaker.py`), and what a refusal for load does is the push-back's (`pushback.py`).

Two waits are kept apart. Waiting for a free slot while endpoints are usable is the normal state of a saturated
pool and is never an error. Only time during which no endpoint is usable at all (every one down, draining or
retired) counts against `no_endpoint_timeout_s`.

A worker may name a preferred endpoint (`acquire(prefer=url)`): the one that served the previous turn of its
conversation, whose radix cache holds the conversation's history. It gets a slot there if the endpoint is live,
waiting up to `prefer_wait_s` for one ahead of the two lines (it can use no other endpoint's slot, and its wait is
bounded); then, or at once when that endpoint is down, draining or retired, it falls back to the least-loaded
choice like any other request.

A pushing-back endpoint admits only its probe, and the pool gives that probe to a new prompt rather than to a
retry when one waits (a probe is likely refused, and a retry has already used attempts).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from ..errors import EndpointError, RequestError
from . import pushback
from .breaker import Breaker
from .lifecycle import DOWN, LIVE, Event, next_state
from .state import PUSHBACK_STATUSES, EndpointState

log = logging.getLogger("regen.endpoints")
POLL_S = 1.0  # how often a waiting worker re-checks the pool (state changes also wake it at once)


class Pool:
    """Slots on the endpoints and the lines waiting for them. `failure_threshold` consecutive failures open an
    endpoint's circuit; its cooldown doubles up to `max_cooldown_s` (`breaker.Breaker`)."""

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
        self.breaker = Breaker(failure_threshold, max_cooldown_s)
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
        """The admitting endpoint with the fewest requests in flight relative to its capacity (ties: the first)."""
        now = self.clock()
        admitting = [ep for ep in self.endpoints if pushback.admits(ep, now, probe=probe)]
        return min(admitting, key=lambda ep: ep.inflight / ep.capacity, default=None)

    def _probe_for_retries(self) -> bool:
        """Whether a retry may be a pushing-back endpoint's probe: only when no new prompt waits to be it. A probe
        is likely refused, and a refusal uses one of the prompt's attempts: a retry has already used some."""
        return all(fut.done() for fut in self._new)

    def _admit(self, ep: EndpointState) -> EndpointState:
        ep.inflight += 1
        if (calm_s := pushback.admitted(ep, self.clock())) is not None:
            self._wake_in(calm_s)  # the probe: waiting workers get another look once its calm period is over
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
        if pushback.admits(home, self.clock(), probe=False) and not line:
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
        if not (self._retries or self._new or any(self._pinned.values())):
            return  # nobody waits: the common case, on every release of a busy run
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
                elif pushback.admits(ep, self.clock(), probe=False):  # its probe goes to a prompt that can go elsewhere
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
        elif error.status in PUSHBACK_STATUSES:  # live and full: a push-back, never the breaker's
            if hold := pushback.refused(ep, error, self.clock()):
                self._wake_in(hold)
        else:
            self._failed(ep, str(error))
        pushback.calm(ep, self.clock())
        self._wake()

    def _succeeded(self, ep: EndpointState, latency: float | None) -> None:
        ep.ok += 1
        self.breaker.succeeded(ep)
        ep.last_ok_at = self.clock()
        self._move(ep, Event.SUCCEEDED)
        ep.ramp_up()
        if latency is not None:
            ep.latencies.append(latency)
            if len(ep.latencies) > 512:
                del ep.latencies[:256]

    def _failed(self, ep: EndpointState, why: str) -> None:
        ep.errors += 1
        opens = self.breaker.failed(ep)
        if next_state(ep.state, Event.FAILED):  # once down or retired, the reason it went stays its last error
            ep.note_error(why, self.clock())
            self._move(ep, Event.FAILED)
            if opens:
                self.mark_down(ep, why)

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
        """Open the circuit: probe again after the breaker's cooldown (`breaker.Breaker.opened`).

        An endpoint already down stays on its schedule and keeps its reason: the requests it had in flight fail
        one by one when it goes, and each of them must not push its next probe further away.
        """
        if not self._move(ep, Event.WENT_DOWN):
            return
        ep.note_error(why, self.clock())
        log.warning("%s: down (%s)", ep.url, why, extra={"event": "endpoint_down", "url": ep.url, "why": why})
        self.breaker.opened(ep, self.clock())
        ep.pushback.end()
        self._wake_pinned()  # its conversations go elsewhere now

    def probe_failed(self, ep: EndpointState, why: str, *, max_wait_s: float) -> None:
        """A probe of a down endpoint failed: probe again after its cooldown, at most `max_wait_s` from now."""
        if ep.state != DOWN:
            return
        ep.note_error(why, self.clock())
        self.breaker.probe_failed(ep, self.clock(), max_wait_s=max_wait_s)

    def probe_missed(self, ep: EndpointState, why: str, in_a_row: int) -> None:
        """A live endpoint failed `in_a_row` probes (not yet enough to declare it down): say so in reports."""
        ep.probe_failures = in_a_row
        ep.note_error(why, self.clock())

    def mark_up(self, ep: EndpointState) -> None:
        """A probe passed: half-open the circuit (degraded; one more failure opens it again), then ramp up."""
        if self._move(ep, Event.PROBE_PASSED):
            log.info("%s: up again, back in the pool", ep.url, extra={"event": "endpoint_up", "url": ep.url})
            self.breaker.half_opened(ep)
            self._wake()

    def due_for_probe(self) -> list[EndpointState]:
        now = self.clock()
        return [ep for ep in self.endpoints if self.breaker.due(ep, now)]

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
        ep.note_error(why, self.clock())
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
        self.breaker.probe_at_once(ep)

    def pushed_back_within(self, ep: EndpointState, seconds: float) -> bool:
        """The server refused requests for load, enough to hold admissions, less than `seconds` ago."""
        return pushback.refused_within(ep, self.clock(), seconds)

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
