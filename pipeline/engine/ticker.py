"""The run's snapshot on a clock: what the progress bar, Prometheus, RUN_DIR/metrics/ and the progress log lines see.

Every `progress_interval_s` (0.5 s) the rates move on and the snapshot goes to the exporter and the caller's
progress callback; at most once a second it is also appended to this worker's RUN_DIR/metrics/ file (the last line
is what `regen status` reads). The progress log lines (`output.progress_interval_s`) are built from the same
snapshot, on their own clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from .logs import ProgressLog
from .metrics import Metrics
from .prometheus import Exporter

Snapshot = Callable[[], dict[str, Any]]
ProgressFn = Callable[[dict[str, Any]], None]
METRICS_FILE_EVERY_S = 1.0


class Ticker:
    def __init__(
        self,
        metrics: Metrics,
        snapshot: Snapshot,
        *,
        path: Path,
        interval_s: float,
        exporter: Exporter,
        on_progress: ProgressFn | None = None,
    ):
        self.metrics = metrics
        self.snapshot = snapshot
        self.path = path  # this worker's RUN_DIR/metrics/ file
        self.interval_s = interval_s
        self.exporter = exporter
        self.on_progress = on_progress

    async def run(self) -> None:
        """Tick until cancelled."""
        self.path.parent.mkdir(exist_ok=True)
        last_write = 0.0
        while True:
            await asyncio.sleep(self.interval_s)
            self.metrics.tick()
            snap = self.snapshot()
            self.exporter.publish(snap)
            if self.on_progress is not None:
                self.on_progress(snap)
            if time.monotonic() - last_write >= METRICS_FILE_EVERY_S:
                last_write = time.monotonic()
                await asyncio.to_thread(append_line, self.path, orjson.dumps(snap))


async def progress_lines(snapshot: Snapshot, interval_s: float) -> None:
    """A progress log line every `interval_s`, until cancelled."""
    lines = ProgressLog()
    while True:
        await asyncio.sleep(interval_s)
        lines.emit(snapshot())


def append_line(path: Path, line: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(line + b"\n")
