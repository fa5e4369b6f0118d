"""The run's failure circuit: infrastructure failures are not data.

A 5xx, a 503 "queue full", a refused connection, a timeout or a 400 that every prompt gets for the same sampling
parameter says nothing about the prompt. A few of them are normal and are retried; when they dominate, rejecting
prompt after prompt as `exhausted_retries` (or `http_4xx`) would turn a large part of a dataset into rejects while
the exit code says success. So the dispatcher reports the outcome of every request here, and when failures make up
at least `share` of the last `window` outcomes across all endpoints, the run stops with `InfrastructureError`
(exit 3) naming the most frequent failure. Prompts in flight are cancelled and stay pending; the next run, once the
cause is fixed, generates them.

The rule, with the defaults (`client.failure_window = 100`, `client.max_failure_share = 0.9`): 90 failed requests
among the last 100 stop the run. 2% of 503s, a restart, or a quarter of mixed transient faults never come close;
one server of four answering 503 to everything cannot reach it while the other three complete requests.

A 4xx is the prompt's fault only if the servers accept other prompts: before the first completion of a run a 4xx is
retried like a server failure (a config mistake must not reject prompts one by one), after it a 4xx is `http_4xx`.
"""

from __future__ import annotations

import re
from collections import Counter, deque

from ..errors import InfrastructureError

_NUMBERS = re.compile(r"\d+")


class FailureCircuit:
    def __init__(self, window: int = 100, share: float = 0.9) -> None:
        self.window = window
        self.share = share
        self._outcomes: deque[str | None] = deque(maxlen=window)  # None = a completion came back
        self._failures = 0
        self.seen_completion = False

    def completed(self) -> None:
        """A request returned a completion (whatever the validators then say about it)."""
        self.seen_completion = True
        self._push(None)

    def failed(self, message: str) -> None:
        """A request failed for a reason that may not be the prompt's; raises InfrastructureError when failures
        dominate the window."""
        self._push(message)
        if len(self._outcomes) == self.window and self._failures >= self.share * self.window:
            raise InfrastructureError(self._message())

    def _push(self, outcome: str | None) -> None:
        if len(self._outcomes) == self.window and self._outcomes[0] is not None:
            self._failures -= 1
        self._outcomes.append(outcome)
        if outcome is not None:
            self._failures += 1

    def _message(self) -> str:
        kinds = Counter(_NUMBERS.sub("N", m) for m in self._outcomes if m is not None)
        common, n = kinds.most_common(1)[0]
        example = next(m for m in reversed(self._outcomes) if m is not None and _NUMBERS.sub("N", m) == common)
        example = example.rstrip(". ")
        return (
            f"{self._failures} of the last {self.window} requests failed, most often ({n}x): {example}. "
            "These failures are the servers' or the config's, not the prompts': the run stops instead of rejecting "
            "them. The prompts not finished stay pending: fix the cause, then rerun the same command"
        )
