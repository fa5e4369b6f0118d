"""The async engine of one prompt's life: choose an endpoint, send, validate, retry within the budget, store.

A prompt may be a conversation with several assistant turns to generate (conversation.py): they are generated in
order, each from the regenerated history, each validated and retried on its own; a finished turn is journaled
(`Sink.add_turn`) so a crash does not generate it again, and the row is stored once, when its last turn is done or
one turn fails for good (the reject's detail names the turn).

`client.max_attempts` bounds, per turn, the requests that may be the prompt's fault (rejected completions, 5xx,
timeouts).
A request lost because its endpoint went down (refused, reset mid-response), hung, or refused for load (503 queue
full, 429, 408) is not counted there; a separate bound, `client.max_endpoint_failures`, stops a prompt that takes
every server it touches down with it, or that no server ever takes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import conversation
from ..config import Config
from ..endpoints.pool import Pool
from ..endpoints.retry import RetryPolicy
from ..endpoints.state import PUSHBACK_STATUSES, EndpointState
from ..errors import (
    ContextLengthError,
    EndpointDownError,
    FatalEndpointError,
    HungRequestError,
    PermanentRequestError,
    RequestError,
    RetryableRequestError,
)
from ..records import Completion, Prompt, Turn
from ..schema import accepted_row, rejected_row
from ..validator import looping, validate
from .circuit import FailureCircuit
from .deadline import Deadlines
from .metrics import Metrics
from .sink import Sink


@dataclass
class _Tally:
    """What one prompt has used so far, and the last reason it was not accepted."""

    attempts: int = 0
    endpoint_failures: int = 0
    last: Completion | None = None
    reason: str = "exhausted_retries"
    detail: str = ""
    final: bool = False  # a permanent error: no more attempts


class Dispatcher:
    def __init__(
        self,
        cfg: Config,
        pool: Pool,
        sink: Sink,
        metrics: Metrics,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        partial: dict[str, list[Turn]] | None = None,
        circuit: FailureCircuit | None = None,
    ):
        self.cfg = cfg
        self.pool = pool
        self.sink = sink
        self.metrics = metrics
        self.retry = retry or RetryPolicy(cfg.client.backoff_base_s, cfg.client.backoff_max_s)
        self.sleep = sleep
        self.partial = partial if partial is not None else {}  # turns finished before a restart, by prompt id
        self.circuit = circuit or FailureCircuit(cfg.client.failure_window, cfg.client.max_failure_share)
        c = cfg.client
        self.deadlines = Deadlines(floor_s=c.hang_floor_s, slack=c.hang_slack, ceiling_s=c.request_timeout_s)
        self._started: dict[asyncio.Task[Any], tuple[EndpointState, str, float]] = {}  # requests in flight
        # cancelled by watch_hangs; True when what ran out was request_timeout_s itself, not a learned deadline
        self._hung: dict[asyncio.Task[Any], bool] = {}
        self._rids = itertools.count()
        self._chars_tokens = [0, 0]  # characters and tokens of the completions seen (a stopped stream's estimate)
        self.inflight: set[asyncio.Task[None]] = set()
        self.stopping = False  # set on SIGINT/SIGTERM: cancellations are the drain's, not the health monitor's

    async def feed(self, queue: asyncio.Queue[Prompt | None], tg: asyncio.TaskGroup) -> None:
        """Start one task per free endpoint slot until a None sentinel arrives.

        A slot is taken before a prompt, so the number of requests in flight follows the pool's free capacity,
        also when endpoints join or leave during the run; no task exists for a prompt that is not being sent.
        """
        while True:
            ep = await self.pool.acquire()
            try:
                prompt = await queue.get()
            except asyncio.CancelledError:  # the drain stops the intake: the slot was never used
                await asyncio.shield(self.pool.release(ep, unused=True))
                raise
            if prompt is None:
                await self.pool.release(ep, unused=True)
                return
            self.inflight.add(tg.create_task(self.process(prompt, ep)))  # which leaves the set as it ends

    async def process(self, prompt: Prompt, ep: EndpointState | None = None) -> None:
        """Drive one prompt, every turn of it, to its final place: exactly one add_accepted or add_rejected call."""
        try:
            positions = prompt.positions
            done = self.partial.pop(prompt.id, [])[: len(positions) - 1]
            attempts = sum(t.attempts for t in done)
            for k in range(len(done), len(positions)):
                request = self._request(prompt, k, done)
                last = k == len(positions) - 1
                home = done[-1].endpoint if done else None  # its radix cache holds this turn's history
                label = f"turn {k + 1}/{len(positions)}: " if len(positions) > 1 else ""
                outcome = await self._turn(
                    request, ep, done, label, home if self.cfg.client.sticky_conversations else None
                )
                ep = None
                if outcome is None:
                    return
                completion, turn = outcome
                if home is not None:
                    self.metrics.record_later_turn(completion.endpoint == home)
                attempts += turn.attempts
                done.append(turn)
                if last:
                    self.sink.add_accepted(accepted_row(request, completion, attempts, done))
                    self.metrics.record_accept(completion.completion_tokens)
                else:
                    self.sink.add_turn(prompt.id, k, turn)
                    self.metrics.output_tokens += completion.completion_tokens or 0
        finally:  # not a done callback: one fewer event-loop callback per prompt (~0.6 us)
            self.inflight.discard(asyncio.current_task())

    def _request(self, prompt: Prompt, k: int, done: list[Turn]) -> Prompt:
        """The prompt as sent for turn k: the conversation before it, with the regenerated answers."""
        keep = self.cfg.generation.history_reasoning
        if not prompt.turns and (keep or not any("reasoning_content" in m for m in prompt.messages)):
            return prompt  # one new turn after the given messages: sent as they are
        answers = [t.answer for t in done]
        reasoning = [t.reasoning for t in done] if keep else []
        messages = conversation.request(prompt.messages, prompt.positions, k, answers, reasoning, kept_reasoning=keep)
        return dataclasses.replace(prompt, messages=tuple(messages))

    async def _turn(
        self,
        prompt: Prompt,
        ep: EndpointState | None,
        done: list[Turn],
        label: str,
        prefer: str | None = None,
    ) -> tuple[Completion, Turn] | None:
        """One turn within its attempts: the accepted completion and its `turns` entry, or None once the row is
        rejected (stored here, with the turns `done` before it). Each attempt prefers the endpoint `prefer`."""
        t = _Tally()
        while t.attempts < self.cfg.client.max_attempts and t.endpoint_failures < self.cfg.client.max_endpoint_failures:
            retry = t.attempts + t.endpoint_failures > 0  # a retry takes the next free slot before new prompts
            completion = await self._send(prompt, ep or await self.pool.acquire(retry=retry, prefer=prefer), t)
            ep = None
            if completion is None:
                if t.final:  # a permanent error: the prompt itself is at fault
                    self._reject(prompt, None, t.attempts, t.reason, label + t.detail, done)
                    return None
                continue
            t.attempts += 1
            self._learn_chars_per_token(completion)
            verdict = validate(completion, self.cfg.validate, self.cfg.generation.thinking, prompt)
            if verdict.repetition_chars is not None:
                completion = dataclasses.replace(completion, repetition_chars=verdict.repetition_chars)
            if verdict.ok:
                return completion, Turn.of(completion, t.attempts)
            t.last, t.reason, t.detail = completion, verdict.reason or "invalid", verdict.detail
            spent = self._spent_tokens(completion)
            self.metrics.output_tokens += spent
            if verdict.reason == "looping" or (verdict.reason == "truncated" and self._loops_counted(completion)):
                max_tokens = self.cfg.generation.max_tokens
                self.metrics.record_looping(
                    stopped=completion.loop_stopped, streamed_tokens=spent, max_tokens=max_tokens
                )
        self._reject(prompt, t.last, t.attempts, t.reason, label + t.detail, done)
        return None

    def _loops_counted(self, completion: Completion) -> bool:
        """Whether a truncated completion ran to max_tokens in a loop (the guard off): a looping one all the same."""
        return self.cfg.validate.reject_looping != "off" and bool(looping(completion))

    def _learn_chars_per_token(self, completion: Completion) -> None:
        if completion.completion_tokens:
            self._chars_tokens[0] += len(completion.reasoning or "") + len(completion.answer)
            self._chars_tokens[1] += completion.completion_tokens

    def _spent_tokens(self, completion: Completion) -> int:
        """A completion's tokens; for a stream the loop guard stopped (no usage came back), an estimate from the
        characters that streamed, at this run's characters per token so far (4 until a completion has told)."""
        if completion.completion_tokens is not None or not completion.loop_stopped:
            return completion.completion_tokens or 0
        chars, tokens = self._chars_tokens
        per_token = chars / tokens if tokens else 4.0
        return round((len(completion.reasoning or "") + len(completion.answer)) / per_token)

    async def _send(self, prompt: Prompt, ep: EndpointState, t: _Tally) -> Completion | None:
        """One request on a slot of `ep`; the slot is always given back. None: no completion (see `t`)."""
        rid = f"regen-{prompt.id[:64]}-{t.attempts}-{next(self._rids)}"
        self.metrics.requests += 1
        try:
            completion = await self._chat(prompt, ep, t.attempts, rid)
        except FatalEndpointError:
            await self.pool.release(ep, unused=True)
            raise
        except ContextLengthError as exc:  # the prompt does not fit the server's context: a fact about the prompt
            await self.pool.release(ep)
            t.attempts, t.reason, t.detail, t.final = t.attempts + 1, "context_length", str(exc), True
            # one reject of its own, never retried; counted by the circuit all the same, so a max_tokens that leaves
            # no prompt room (the config's fault) stops the run once it dominates (exit 3) instead of rejecting all
            self.circuit.failed(str(exc))
            return None
        except PermanentRequestError as exc:  # the prompt is at fault (e.g. a bad parameter) ...
            await self.pool.release(ep)
            if self.circuit.seen_completion:
                t.attempts, t.reason, t.detail, t.final = t.attempts + 1, "http_4xx", str(exc), True
                return None
            # ... unless no prompt has been served yet: then it is more likely the config's (see circuit.py)
            await self._failed(t, exc, f"before any completion of this run: {exc}")
            return None
        except (HungRequestError, EndpointDownError) as exc:  # the endpoint's fault, not one of the prompt's attempts
            await self._endpoint_failed(ep, t, exc)
            return None
        except RequestError as exc:  # 5xx, timeouts, invalid JSON: counted, retried after a backoff
            await self.pool.release(ep, error=exc)
            await self._failed(t, exc, str(exc), refused=exc.status in PUSHBACK_STATUSES)
            return None
        except asyncio.CancelledError:  # drain timed out: give the slot back; the prompt stays pending
            await asyncio.shield(self.pool.release(ep, unused=True))
            raise
        await self.pool.release(ep, latency=completion.latency_s)
        self.circuit.completed()
        self.deadlines.observe(ep.url, completion.completion_tokens, completion.latency_s)
        return completion

    async def _endpoint_failed(self, ep: EndpointState, t: _Tally, exc: HungRequestError | EndpointDownError) -> None:
        """A request lost to its endpoint: hung (aborted past its deadline) or down (refused, reset, declared down
        while in flight). It counts toward the prompt's `max_endpoint_failures`; a down endpoint is also marked down
        (a hung one is the health monitor's to judge)."""
        t.endpoint_failures += 1
        self.metrics.record_error(str(exc))
        if isinstance(exc, EndpointDownError):
            self.metrics.endpoint_failures += 1
            self.pool.mark_down(ep, str(exc))
        await self.pool.release(ep, error=exc)
        t.reason, t.detail = "exhausted_retries", f"{t.endpoint_failures} endpoint failures; last: {exc}"
        self.circuit.failed(str(exc))

    async def _failed(self, t: _Tally, exc: RequestError, detail: str, *, refused: bool = False) -> None:
        """A request failure, then a backoff (or the server's Retry-After) unless it was the last of its budget.

        A refusal for load (503 "The request queue is full.", 429, 408) means the server is full, not failing,
        and the prompt is not at fault: it counts toward `max_endpoint_failures` (so a prompt no server ever takes
        still ends), not one of the prompt's `max_attempts` (four refusals in a burst rejected a prompt that no
        server had looked at). Any other failure uses one of the attempts."""
        if refused:
            t.endpoint_failures += 1
            n, budget, what = (
                t.endpoint_failures,
                self.cfg.client.max_endpoint_failures,
                "refusals or endpoint failures",
            )
        else:
            t.attempts += 1
            n, budget, what = t.attempts, self.cfg.client.max_attempts, "attempts"
        self.metrics.retries += 1
        self.metrics.record_error(str(exc))
        t.reason, t.detail = "exhausted_retries", f"{n} {what}; last: {detail}"
        self.circuit.failed(str(exc))
        if n < budget:
            await self.sleep(self.retry.delay_for(n, exc.retry_after))

    async def _chat(self, prompt: Prompt, ep: EndpointState, attempt: int, rid: str) -> Completion:
        """The request itself, registered with its endpoint so the health monitor can cancel it if it hangs."""
        task = asyncio.current_task()
        kills = ep.kills
        if task is not None:
            ep.tasks.add(task)
            self._started[task] = (ep, rid, time.monotonic())
        try:
            return await ep.client.chat(prompt, attempt, rid)
        except asyncio.CancelledError:
            if task is None or task not in self._hung:
                raise
            timed_out = self._hung.pop(task)
            task.uncancel()  # cancelled by watch_hangs, not by the run: abort it on the server and retry
            ep.client.abort_moved(rid)
            if timed_out:  # as any failed request: an attempt, then a backoff
                limit = self.cfg.client.request_timeout_s
                raise RetryableRequestError(
                    f"{ep.url}: request timed out after {limit:g}s (request_timeout_s); aborted"
                ) from None
            raise HungRequestError(f"{ep.url}: request {rid} past its deadline (hung; aborted)") from None
        finally:
            if task is not None:
                self._started.pop(task, None)
                ep.tasks.discard(task)
                if ep.kills != kills and task.cancelling() and not self.stopping:
                    task.uncancel()  # the health monitor declared this endpoint hung: retry elsewhere ...
                    ep.client.abort_moved(rid)  # ... and abort it there, should the server come back
                    raise EndpointDownError(f"{ep.url}: endpoint declared down while the request was in flight")

    async def watch_hangs(self) -> None:
        """Give up requests past their deadline (engine/deadline.py), re-evaluated as the endpoints' rates are learned:
        a request sent before any rate was known is not held to request_timeout_s once one is.

        This is the one whole-request bound of a generation (the client sets no timer per request): past
        request_timeout_s a request times out, as a failed attempt; past a shorter learned deadline it is hung, an
        endpoint failure. Either way it is aborted on the server, which would otherwise decode it for nobody."""
        c = self.cfg.client
        every = min(1.0, c.hang_floor_s / 4, c.request_timeout_s / 4)
        max_tokens = self.cfg.generation.max_tokens
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for task, (ep, _rid, start) in list(self._started.items()):
                if task in self._hung:
                    continue
                deadline = self.deadlines.for_request(ep.url, max_tokens)
                if now - start > deadline:
                    self._hung[task] = deadline >= c.request_timeout_s
                    task.cancel()

    def _reject(
        self,
        prompt: Prompt,
        last: Completion | None,
        attempts: int,
        reason: str,
        detail: str,
        done: Sequence[Turn] = (),
    ) -> None:
        self.sink.add_rejected(rejected_row(prompt, last, attempts, reason, detail, done))
        self.metrics.record_reject(reason)
