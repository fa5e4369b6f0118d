"""A graceful stop of `regen run`: SIGINT (Ctrl-C), SIGTERM or SIGHUP stop the intake, let requests in flight finish
within `client.drain_timeout_s` (saying so at once), then cancel what is left; a second signal cancels at once.

A cancelled prompt stays pending, nothing finished is lost: the runner commits and raises Interrupted (exit 130),
and rerunning the same command resumes. Signal handlers are installed only where the caller allows it
(`RunOptions.handle_signals`: not in a library user's thread or running loop).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from .dispatcher import Dispatcher

log = logging.getLogger("regen.run")

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP too: a closed terminal drains like Ctrl-C


class Shutdown:
    """The stop a signal asks for: `requested` once one came, and the drain that follows."""

    def __init__(self, *, drain_timeout_s: float, handle_signals: bool = True):
        self.drain_timeout_s = drain_timeout_s
        self.handle_signals = handle_signals
        self.requested = asyncio.Event()
        self._hurry = asyncio.Event()  # a second signal: cancel what is in flight now
        self._signal_name = "SIGINT"

    def install(self) -> None:
        if not self.handle_signals:
            return
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self.on_signal, sig)

    def remove(self) -> None:
        if not self.handle_signals:
            return
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)

    def on_signal(self, sig: signal.Signals) -> None:
        """The first SIGINT/SIGTERM/SIGHUP drains; a second one stops now."""
        if self.requested.is_set():
            self._hurry.set()
            return
        self._signal_name = sig.name
        self.requested.set()

    async def drain_on_stop(self, producer: asyncio.Task[None], feeder: asyncio.Task[None], d: Dispatcher) -> None:
        """On SIGINT/SIGTERM/SIGHUP: take no new prompts, let in-flight ones finish for a grace period (saying so at
        once), then cancel; a second signal cancels now. A cancelled prompt stays pending: nothing is lost."""
        await self.requested.wait()
        d.stopping = True
        producer.cancel()
        feeder.cancel()  # prompts still queued stay pending for the next run
        timeout = self.drain_timeout_s
        if d.inflight:
            log.warning(
                "%s: finishing %d requests in flight for at most %.0fs, then exiting; %s again to stop now (they "
                "stay pending: nothing finished is lost)",
                self._signal_name, len(d.inflight), timeout, "Ctrl-C" if self._signal_name == "SIGINT" else "signal",
                extra={"event": "draining", "inflight": len(d.inflight), "drain_timeout_s": timeout},
            )  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                while d.inflight and not self._hurry.is_set():
                    hurry = asyncio.ensure_future(self._hurry.wait())
                    await asyncio.wait([*d.inflight, hurry], return_when=asyncio.FIRST_COMPLETED)
                    hurry.cancel()
        except TimeoutError:
            pass
        if d.inflight:
            log.warning("stopping now: %d requests cancelled, their prompts stay pending", len(d.inflight),
                        extra={"event": "drain_cut", "inflight": len(d.inflight)})  # fmt: skip
        for task in list(d.inflight):
            task.cancel()
