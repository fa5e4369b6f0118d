"""The stream guard: a chat stream's reasoning and answer, judged by the loop detector (pipeline/loops.py) as the
bytes arrive, so a generation that falls into a loop is stopped there instead of decoding to `max_tokens`.

`take` is the transport's `on_chunk`: it keeps the bytes and, every `CHECK_BYTES` of them, takes the text deltas of
the complete SSE events among them (SGLang's text events by their deltas alone, as `sse.parse_stream` does; any
other event parsed whole, in one orjson call) and feeds them to one `LoopGuard` per field. Once either loops
it raises `LoopStopped`, which leaves the response (the transport closes the connection: its body was not read to
the end); the client then aborts the request on the server by its rid and returns what had streamed (`partial`, a
`wire.Wire` built by the same `Pieces` as a whole stream's, with the guard's finding) as a completion with
`loop_stopped` set, which the validator always rejects as `looping` and the dispatcher resamples.

The guard stops only repetition no finished answer has (loops.GUARD_REPEAT: 8,000 characters beyond the first copy
of the unit), and not a run the prompt holds whole (`exempt`: an answer copying a long run of its input).

Cost: each event is parsed twice (here, and once more in `sse.parse_stream` when the stream ends normally), plus
the guard's own check every 1 KB of text (BENCHMARKS.md "Loops"). A fast server's whole stream may arrive in one or
two reads, closing `data: [DONE]` included: that frame is left out before the parse, so those reads take the same
one-parse path. `client.loop_guard = false` turns the guard off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson

from ..loops import Loop, LoopGuard
from .sse import take_text_events
from .wire import Pieces, Wire

CHECK_BYTES = 8192  # SSE bytes between two parses (~1 KB of text at SGLang's ~150 bytes of framing per event)
_LAST = b"\n\ndata: [DONE]"


class LoopStopped(Exception):
    """The stream loops: stop reading it. `field` is the text that loops ("reasoning" or "answer")."""

    def __init__(self, loop: Loop, field: str):
        super().__init__(f"{field} loops from char {loop.start}")
        self.loop, self.field = loop, field


def _events(events: bytes) -> list[Any] | None:
    """The JSON events of whole SSE frames: as SGLang frames them (`data: {...}` and a blank line each), by one
    replace and one parse; any other framing line by line; None when one cannot be read. A stream's closing
    `data: [DONE]` frame is left out first: a fast server's whole stream arrives in one or two reads, all of which
    would otherwise go line by line."""
    if events.endswith(_LAST):
        events = events[: -len(_LAST)]
    elif events == _LAST[2:]:
        return []
    if events.startswith(b"data: {") and b"[DONE]" not in events:
        try:
            return list(orjson.loads(b"[" + events[6:].replace(b"\n\ndata: ", b",") + b"]"))
        except orjson.JSONDecodeError:
            pass
    payloads = [line[5:].strip() for line in events.split(b"\n") if line.startswith(b"data:")]
    try:
        return list(orjson.loads(b"[" + b",".join(p for p in payloads if p.startswith(b"{")) + b"]"))
    except orjson.JSONDecodeError:
        return None


def _frames_end(buffer: bytearray) -> int:
    """Where the whole SSE frames in `buffer` end (after the blank line closing the last one), or -1. SGLang ends a
    frame with LF LF; a gateway may reframe with CR LF CR LF, which the SSE format allows as well."""
    lf, crlf = buffer.rfind(b"\n\n"), buffer.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else -1, crlf + 4 if crlf >= 0 else -1)


class StreamGuard:
    """One streamed chat completion's text, guarded as it arrives. `exempt` gives the prompt's text (asked for only
    when a loop is found)."""

    __slots__ = ("_buffer", "_fed", "_off", "answer", "pieces", "reasoning")

    def __init__(self, exempt: Callable[[], str] | None = None) -> None:
        self._buffer = bytearray()
        self._off = False  # an event it could not read: the stream's own parse judges the stream, unguarded
        # the prompt's text is joined once, on the first loop found, however long a copied run goes on
        exempt = functools.cache(exempt) if exempt is not None else None
        self.reasoning, self.answer = LoopGuard(exempt=exempt), LoopGuard(exempt=exempt)
        self.pieces = Pieces()  # what has streamed so far, as the whole stream's parse takes it
        self._fed = [0, 0]  # reasoning and content pieces already fed to their guard

    def take(self, piece: bytes) -> None:
        """The transport's `on_chunk`. Raises LoopStopped once the reasoning or the answer loops."""
        if self._off:
            return
        self._buffer += piece
        if len(self._buffer) >= CHECK_BYTES:
            self._scan()

    def _scan(self) -> None:
        end = _frames_end(self._buffer)
        if end < 0:
            return
        frames = bytes(self._buffer[:end])
        del self._buffer[:end]
        # SGLang's text events, by their deltas alone (sse.take_text_events); whatever else, parsed whole
        rest = take_text_events(frames, self.pieces)
        parsed = _events(rest.rstrip(b"\r\n")) if rest else []
        if parsed is None:
            self._off = True
            return
        self.pieces.take(event for event in parsed if isinstance(event, dict))
        self._feed()
        if self.reasoning.loop is not None:
            raise LoopStopped(self.reasoning.loop, "reasoning")
        if self.answer.loop is not None:
            raise LoopStopped(self.answer.loop, "answer")

    def _feed(self) -> None:
        thoughts, texts = self.pieces.reasoning, self.pieces.content
        for thought in thoughts[self._fed[0] :]:
            self.reasoning.feed(thought)
        for text in texts[self._fed[1] :]:
            self.answer.feed(text)
        self._fed = [len(thoughts), len(texts)]

    def partial(self, stopped: LoopStopped) -> Wire:
        """What had streamed when it was stopped: finish_reason `abort` (what SGLang reports for an aborted
        request), no usage (the server never sent it), and the guard's finding."""
        return self.pieces.result(finish_reason="abort", loop=stopped.loop, loop_field=stopped.field)
