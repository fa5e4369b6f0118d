"""What a streamed chat completion adds up to: the SSE body of one response becomes its content, reasoning, finish
reason, usage and model.

The body is read whole. regen stores finished rows, so streaming is there for one thing, noticing a stalled server
(a stream's bytes stop), and the transport does that while it reads the bytes (`transport.Timeouts.stall`); only the
loop guard (endpoints/loop_guard.py) looks at the text as it comes, by `take_text_events` every 8 KB. A thinking
completion streams one event per decode step, ~240 for 1,800 tokens, and parsing each in full was most of what
streaming cost (BENCHMARKS.md). So, in three steps, each falling through to the next for what it cannot vouch for:
1. The leading run of text events that repeat the first event's bytes but for the delta (`take_text_events`):
   one split into frames, one orjson parse of the deltas alone.
2. The rest framed as SGLang frames it (`data: {...}` and a blank line each, then `data: [DONE]`): one JSON array
   by one `bytes.replace`, one orjson parse (`_framed`).
3. Any other framing (CRLF, comments, `data:` without its space): line by line.
Every event is parsed as JSON on each path, and one that is not a JSON object is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .wire import Pieces, Wire

_EVENT, _NEXT, _DONE = b"data: ", b"\n\ndata: ", b"data: [DONE]"


class InvalidStream(Exception):
    """An SSE event that is not one JSON object, or a stream without `[DONE]`."""


class ErrorEvent(Exception):
    """The server streamed an error object instead of a chunk (`{"error": ...}`, `{"object": "error", ...}`, or any
    data of an `event: error` frame)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def parse_stream(body: bytes) -> Wire:
    """The completion a chat stream's body adds up to (wire.Wire). What follows `[DONE]` is ignored."""
    pieces = Pieces()
    body = take_text_events(body, pieces)
    events, done = _framed(body), True
    if events is None:
        events, done = _line_by_line(body)
    take_events(events, pieces)  # an error event is what to report, whether the stream then ended properly or not
    if not done:
        raise InvalidStream("stream ended without [DONE]")
    return pieces.result()


def take_text_events(body: bytes, pieces: Pieces) -> bytes:
    """Take the leading run of events that are the first event but for their delta, by one split into frames and
    one parse of the deltas alone; return what is left of the body (from the first other event) for a full parse.

    Each event SGLang streams is the same bytes, `data: {"id":..,"choices":[{"index":0,"delta":` (the head), then
    the delta, then `,"logprobs":null,"finish_reason":null,..}]}` (the tail) and a blank line, until the finish
    event. The first event, parsed in full, gives both. The body is split into frames on the blank line and `data: `
    that start each (a raw newline cannot occur inside an event's JSON); a frame of the run must start with the head
    and end with the tail, and what is between must parse as one JSON object, so every event taken this way is
    valid JSON of the first event's shape. A body of another shape is returned whole."""
    cut = body.find(b"\n\n")
    if not body.startswith(_EVENT) or cut < 0:
        return body
    first = body[:cut]
    try:
        event = orjson.loads(first[6:])
        [choice] = event["choices"]
        delta = b'"delta":' + orjson.dumps(choice["delta"])
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
        return body
    at = first.find(delta)
    if at < 0 or first.find(delta, at + 1) >= 0 or type(choice["delta"]) is not dict:
        return body
    head, tail = first[len(_EVENT) : at + 8], first[at + len(delta) :]
    if not tail:  # (the delta sits inside `choices`: never the event's last bytes)
        return body
    frames = body[len(_EVENT) :].split(_NEXT)
    run = 0
    for frame in frames:
        if not (frame.startswith(head) and frame.endswith(tail)):
            break
        run += 1
    if run < 2:
        return body
    start, stop = len(head), -len(tail)
    try:
        taken = orjson.loads(b"[" + b",".join([frame[start:stop] for frame in frames[:run]]) + b"]")
    except orjson.JSONDecodeError:
        return body
    if len(taken) != run or not all(type(d) is dict for d in taken):
        return body
    pieces.take_deltas(taken)
    if not pieces.model and isinstance(event.get("model"), str) and event["model"]:
        pieces.model = event["model"]
    return _EVENT + _NEXT.join(frames[run:]) if run < len(frames) else b""


def _framed(body: bytes) -> list[Any] | None:
    """The events of a body framed as SGLang frames them, by one replace and one parse; None for other framing."""
    end = body.find(_DONE)
    if not body.startswith(_EVENT) or end < 0 or body[end - 2 : end] != b"\n\n":
        return None
    events = body.count(b"data:", 0, end)  # (a `data:` inside text makes this too many: read line by line then)
    try:
        parsed = orjson.loads(b"[" + body[6 : end - 2].replace(_NEXT, b",") + b"]")
    except orjson.JSONDecodeError:
        return None
    ok = isinstance(parsed, list) and len(parsed) == events and all(type(e) is dict for e in parsed)
    return parsed if ok else None


def _line_by_line(body: bytes) -> tuple[list[dict[str, Any]], bool]:
    """The events up to `[DONE]`, and whether it came. The data of an `event: error` frame is an error, whatever
    its shape (vLLM-style servers and several gateways name the event instead of the object)."""
    payloads: list[bytes] = []
    errors: set[int] = set()
    named_error = False
    for line in body.split(b"\n"):
        line = line.strip()
        if not line:
            named_error = False  # a blank line ends the frame
        elif line.startswith(b"event:"):
            named_error = line[6:].strip() == b"error"
        elif line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return _mark_errors(_parse(payloads), errors), True
            if named_error:
                errors.add(len(payloads))
            payloads.append(payload)
    return _mark_errors(_parse(payloads), errors), False


def _mark_errors(events: list[dict[str, Any]], errors: set[int]) -> list[dict[str, Any]]:
    return [{"error": e} if i in errors and "error" not in e else e for i, e in enumerate(events)]


def _parse(payloads: list[bytes]) -> list[dict[str, Any]]:
    """One orjson call for all payloads; each must be one JSON object."""
    try:
        events = orjson.loads(b"[" + b",".join(payloads) + b"]")
    except orjson.JSONDecodeError:
        events = None
    # one object per payload: a payload like `1,2` must not pass as two elements of the joined array
    if not isinstance(events, list) or len(events) != len(payloads) or not all(type(e) is dict for e in events):
        raise InvalidStream("invalid JSON in an SSE chunk")
    return events


def take_events(events: Iterable[dict[str, Any]], pieces: Pieces) -> None:
    """A stream's parsed events into `pieces`; an error event raises ErrorEvent, whatever came before it."""
    for event in events:
        if "error" in event or event.get("object") == "error":
            err = event.get("error", event)
            code = err.get("code") if isinstance(err, dict) else None
            message = err.get("message") if isinstance(err, dict) else str(err)
            raise ErrorEvent(int(code) if isinstance(code, int) else 500, str(message))
    pieces.take(events)
