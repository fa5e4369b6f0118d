"""When a run makes its finished rows durable: every `output.sync_interval_s`, and sooner once a row group's worth
waits.

The store says when enough waits (`RunStore.needs_sync`); the sink calls `on_add` after each row or turn it hands
on, and the cadence syncs at once then, so what waits in memory for the journal follows the row group, not the
rate. At ~3,000 completions/s a second's rows held ~100 MB of RSS (scripts/bench.py --only overhead).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..store import RunStore
from .metrics import Metrics

log = logging.getLogger("regen.run")


class CommitCadence:
    def __init__(self, store: RunStore, metrics: Metrics, *, interval_s: float):
        self.store = store
        self.metrics = metrics
        self.interval_s = interval_s
        self._backlog = asyncio.Event()  # a row group's worth of rows waits for the journal: sync now

    def on_add(self) -> None:
        """A row or turn was handed to the store (the sink's `on_add`)."""
        if self.store.needs_sync:
            self._backlog.set()

    async def run(self) -> None:
        """Sync on the interval or the backlog, whichever comes first, until cancelled; time each commit."""
        synced = self.metrics.done
        while True:
            try:
                async with asyncio.timeout(self.interval_s):
                    await self._backlog.wait()
            except TimeoutError:
                pass
            self._backlog.clear()
            started, rows = time.monotonic(), self.metrics.done - synced
            await self.store.sync()
            if rows:
                took = time.monotonic() - started
                self.metrics.commit_seconds.observe(took)
                log.debug("committed %d rows in %.1f ms", rows, took * 1000, extra={"event": "commit", "rows": rows})
                synced += rows
