"""What regen takes from an OpenAI batch input line (`{"custom_id", "method", "url", "body"}`), and what it leaves.

A line is a request only as `POST /v1/chat/completions` with a body holding `messages`. Its sampling fields
(`SAMPLING_FIELDS`) and `n` are honoured with `input.request_overrides`; `n` then gives the row's samples, an integer
from 1 to MAX_ROW_SAMPLES (OpenAI's own limit). Every other body field, and these without request_overrides, is
counted (`Unhonoured`) and listed once, after the first full pass over the input, with how to use it.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from ..errors import InputError
from ..records import RequestOverrides
from .conversations import short, type_name

log = logging.getLogger("pipeline.inputs.reader")

BATCH_URL = "/v1/chat/completions"
# Sampling fields of an OpenAI batch body (records.RequestOverrides' fields), and whether each must be an integer
# (else any number).
SAMPLING_FIELDS = {
    "temperature": False,
    "top_p": False,
    "top_k": True,
    "min_p": False,
    "max_tokens": True,
    "max_completion_tokens": True,
    "seed": True,
}
MAX_ROW_SAMPLES = 128  # the largest body.n a row may ask for (OpenAI's own limit on n)


class LineProblem(Exception):
    """Why a batch line cannot become a request (the reader makes the row `bad_input` with it)."""


def request_of(data: dict[str, Any]) -> tuple[Any, RequestOverrides]:
    """(body.messages as given, the sampling fields the body sets); LineProblem when the line is no request."""
    method, url, body = data.get("method"), data.get("url"), data.get("body")
    if method != "POST":
        raise LineProblem(f"method must be 'POST', got {short(method)}")
    if url != BATCH_URL:
        raise LineProblem(f"url must be {BATCH_URL!r}, got {short(url)}")
    if not isinstance(body, dict):
        raise LineProblem(f"body must be an object, got {type_name(body)}")
    if body.get("messages") is None:
        raise LineProblem("body has no messages")
    return body["messages"], _sampling(body)


def row_samples(data: Any, where: str) -> int | None:
    """The samples a line's honoured `body.n` asks for; None when it sets none. InputError naming `where` (file:row)
    for an n that is not an integer from 1 to MAX_ROW_SAMPLES: it decides which ids exist."""
    body = data.get("body") if isinstance(data, dict) else None
    n = body.get("n") if isinstance(body, dict) else None
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ROW_SAMPLES:
        raise InputError(
            f"{where}: body.n must be an integer from 1 to {MAX_ROW_SAMPLES} (the samples of this request), "
            f"got {type_name(n)} {short(n)}"
        )
    return n


class Unhonoured:
    """Body fields this run does not send, counted by rows, and listed once (`warn`)."""

    def __init__(self, *, request_overrides: bool, model: str) -> None:
        self.request_overrides = request_overrides
        self.model = model
        self.counts: Counter[str] | None = Counter()  # None once listed

    def note(self, data: dict[str, Any]) -> None:
        body = data.get("body")
        if self.counts is None or not isinstance(body, dict):
            return
        for key, value in body.items():
            if key in ("messages", "tools") or (key in (*SAMPLING_FIELDS, "n") and self.request_overrides):
                continue
            if key == "model" and value == self.model:
                continue
            self.counts[key] += 1

    def warn(self, pattern: str) -> None:
        """Once, after the first full pass: the fields not honoured, with their rows and how to use them."""
        if not self.counts:
            self.counts = None
            return
        hints = {
            "model": f"requests go to generation.model = {self.model!r}",
            "n": "one completion per request; set input.request_overrides = true to make n samples per row "
            "(as generation.samples does)",
            **{k: "set input.request_overrides = true to use it" for k in SAMPLING_FIELDS},
        }
        listed = [f"{k} ({n} rows{'; ' + hints[k] if k in hints else ''})" for k, n in self.counts.most_common()]
        log.warning(
            "%s: openai-batch body fields that are not honoured, ignored: %s",
            pattern, ", ".join(listed),
            extra={"event": "unhonoured_fields", "fields": dict(self.counts)},
        )  # fmt: skip
        self.counts = None


def _sampling(body: dict[str, Any]) -> RequestOverrides:
    """The sampling fields an OpenAI batch body sets; the runner decides whether to honour them."""
    out: dict[str, Any] = {}
    for key, integer in SAMPLING_FIELDS.items():
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
            kind = "an integer" if integer else "a number"
            raise LineProblem(f"body.{key} must be {kind}, got {type_name(value)} {short(value)}")
        out[key] = value
    return RequestOverrides(**out)
