"""The store as the dispatcher sees it: the `Sink` protocol the dispatcher writes to, and `CountingSink`, which the
runner puts between the dispatcher and the store to count stored rows and log prompts out of retries."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..records import Turn
from .metrics import Metrics

log = logging.getLogger("regen.run")


class Sink(Protocol):
    def add_accepted(self, row: dict[str, Any]) -> None: ...
    def add_rejected(self, row: dict[str, Any]) -> None: ...
    def add_turn(self, prompt_id: str, k: int, turn: Turn) -> None: ...


class CountingSink:
    """The store as the dispatcher sees it: counts stored rows by endpoint and logs prompts out of retries.
    `on_add` is called after every row or turn handed on (the early sync: see `commits.py`)."""

    def __init__(self, sink: Sink, metrics: Metrics, on_add: Callable[[], None] | None = None):
        self.sink = sink
        self.metrics = metrics
        self.on_add = on_add or (lambda: None)

    def add_accepted(self, row: dict[str, Any]) -> None:
        self.sink.add_accepted(row)
        self.metrics.record_stored(row)
        self.on_add()

    def add_turn(self, prompt_id: str, k: int, turn: Turn) -> None:
        self.sink.add_turn(prompt_id, k, turn)
        self.on_add()

    def add_rejected(self, row: dict[str, Any]) -> None:
        self.sink.add_rejected(row)
        self.on_add()
        if row.get("reason") == "exhausted_retries":
            log.warning(
                "%s: rejected, retries exhausted (%s)",
                row.get("id"),
                row.get("detail"),
                extra={"event": "retries_exhausted", "id": row.get("id"), "detail": row.get("detail")},
            )
