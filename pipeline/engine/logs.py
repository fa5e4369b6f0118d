"""The log of a long run: the loggers regen writes to, the progress line, and the handlers the CLI installs.

The library only emits records, on loggers under `regen.` (`regen.run`, `regen.progress`, `regen.endpoints`,
`regen.preflight`, ...), one record per event, each with an `event` name and its fields as record attributes (so
`--log-format json` writes them as keys). The CLI calls `configure()` once; nothing here runs unless it does.

Volume: a progress line is ~250 bytes, so 60 an hour is 15 KB; events are rare (an endpoint going down and up
again is two lines), and the `Burst` filter caps any one kind of event at `burst` lines a minute, counting what it
drops into the next line it lets through, so a flapping server or a wave of exhausted retries cannot fill a disk.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

PROGRESS = logging.getLogger("regen.progress")

# LogRecord attributes that are not an event's own fields.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The event fields passed with `extra=` (everything on the record that logging did not put there)."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """`2025-06-01T12:00:00.000Z INFO regen.endpoints: endpoint down: http://... (reason)`: one line a record."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            text += " | " + self.formatException(record.exc_info).replace("\n", " | ")
        return text.replace("\r", " ").replace("\n", " | ")


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, msg, plus the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            **fields(record),
        }
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class Burst(logging.Filter):
    """At most `burst` records a minute per (logger, event); the next one let through says how many were dropped.

    Progress lines and records of WARNING and above that carry no event name always pass."""

    def __init__(self, burst: int = 10, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.burst, self.window_s, self.clock = burst, window_s, clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._dropped: Counter[tuple[str, str]] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", None)
        if event is None or event == "progress":
            return True
        key = (record.name, str(event))
        now = self.clock()
        start, n = self._seen.get(key, (now, 0))
        if now - start >= self.window_s:
            start, n = now, 0
        self._seen[key] = (start, n + 1)
        if n >= self.burst:
            self._dropped[key] += 1
            return False
        if dropped := self._dropped.pop(key, 0):
            record.msg = f"{record.msg} (and {dropped} more like it in the last minute, not shown)"
            record.suppressed = dropped
        return True


_HANDLER_NAME = "regen-cli"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]  # generic only in typeshed; subscripting fails at run time on 3.11
    """Writes to whatever sys.stderr is at the time (the CLI run in-process by tests swaps it per test)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure(
    fmt: str = "text", level: str | int = "INFO", *, stream: TextIO | None = None, progress_lines: bool = True
) -> logging.Handler:
    """Install the CLI's one handler (on the root logger, so a library's warnings come out in the same format).

    `progress_lines=False` silences `regen.progress` (a progress bar draws it instead). Calling it again replaces
    the handler, so tests that run the CLI in-process several times do not stack handlers."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(Burst())
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)  # other libraries: warnings and errors only
    logging.getLogger("regen").setLevel(level.upper() if isinstance(level, str) else level)
    PROGRESS.setLevel(logging.NOTSET if progress_lines else logging.WARNING)
    return handler


def json_configured() -> bool:
    """Whether the CLI asked for JSON lines (its own messages must then be records, not plain prints)."""
    return any(
        h.get_name() == _HANDLER_NAME and isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers
    )


# ---------------------------------------------------------------- the progress line


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s"


def _waiting(snap: dict[str, Any]) -> str:
    """While no endpoint is usable: why each is not (its last error) and when the run gives up."""
    if not snap.get("gives_up_at"):
        return ""
    why = "; ".join(f"{url}: {ep.get('last_error') or ep['state']}" for url, ep in snap.get("endpoints", {}).items())
    at = time.strftime("%H:%M:%S UTC", time.gmtime(snap["gives_up_at"]))
    return f" | no endpoint usable ({why}); giving up at {at}"


class ProgressLog:
    """A progress line from a run snapshot, with the rates over the time since the previous line."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._last: tuple[float, int, int] | None = None

    def emit(self, snap: dict[str, Any]) -> None:
        now = self.clock()
        refused = snap["rejected_by_reason"].get("bad_input", 0)  # never sent: not progress, not in the rates
        done, tokens = snap["done"] - refused, snap["output_tokens"]
        if self._last is None:
            t0, d0, k0 = now - max(1e-9, snap["elapsed_s"]), 0, 0
        else:
            t0, d0, k0 = self._last
        self._last = (now, done, tokens)
        span = max(1e-9, now - t0)
        rate, tok_rate = (done - d0) / span, (tokens - k0) / span
        overall = snap.get("completions_per_s", 0.0)
        eta = snap["pending"] / (rate or overall) if (rate or overall) else None
        total, finished = snap["total"] - refused, snap["already_done"] + done
        states = Counter(ep["state"] for ep in snap.get("endpoints", {}).values())
        rejects = dict(sorted(snap["rejected_by_reason"].items()))
        PROGRESS.info(
            "%d/%d prompts (%.1f%%)%s | %.2f completions/s, %s output tok/s | ETA %s | rejects %s | endpoints %s%s",
            finished,
            total,
            100.0 * finished / total if total else 100.0,
            f", {refused} refused (bad_input, never sent)" if refused else "",
            rate,
            f"{tok_rate:,.0f}",
            _duration(eta if snap["pending"] else 0),
            " ".join(f"{k}={v}" for k, v in rejects.items()) or "0",
            " ".join(f"{k}={v}" for k, v in sorted(states.items())) or "none",
            _waiting(snap),
            extra={
                "event": "progress",
                "done": finished,
                "total": total,
                "pending": snap["pending"],
                "refused": refused,
                "completions_per_s": round(rate, 3),
                "output_tokens_per_s": round(tok_rate, 1),
                "eta_s": None if eta is None else round(eta),
                "rejected_by_reason": rejects,
                "endpoints_by_state": dict(states),
            },
        )
