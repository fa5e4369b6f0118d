"""HTTP failures as regen's errors: the one map, for every request regen sends (generations, health, loads,
aborts, preflight, launch).

A transport failure (`from_exception`) and an HTTP status (`raise_for_status`) each become one class of the error
tree (pipeline/errors.py), which decides what happens next:
- `EndpointDownError`: the endpoint, not the prompt, is at fault (a refused or reset connection; a name that does
  not resolve, `UnresolvedHostError`); the request does not use one of the prompt's attempts.
- `RetryableRequestError`: may be the request's or a moment's (5xx, 503 queue full, 429, 408, timeouts, a stream
  that ended badly, a body that is not what SGLang sends).
- `PermanentRequestError`: the request itself is refused (400: context length, parameters).
- `FatalEndpointError`: no retry helps (401/403 key, 404 URL, a URL that redirects).
Each timeout says which one ran out (`transport.Timeouts`): a connect, a stalled stream or the whole request (a
generation's whole-request bound is the dispatcher's hang watch, which names `request_timeout_s` itself).
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any, Protocol

import aiohttp
import orjson

from ..errors import (
    ContextLengthError,
    EndpointDownError,
    FatalEndpointError,
    PermanentRequestError,
    RequestError,
    RetryableRequestError,
    UnresolvedHostError,
)


class Bounds(Protocol):
    """The bounds a request ran under (`transport.Timeouts`), read to say which one ran out. A protocol, so this map
    does not import the transport that imports it."""

    @property
    def connect(self) -> float: ...
    @property
    def total(self) -> float | None: ...
    @property
    def stall(self) -> float | None: ...


def from_exception(exc: BaseException, url: str, timeouts: Bounds, *, answered: bool) -> RequestError:
    """The error class of a request that got no whole response. `answered`: its status line had come."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(exc.os_error, socket.gaierror):
            return UnresolvedHostError(f"{url}: cannot resolve host {exc.host!r} ({exc.os_error})")
        said = (
            os.strerror(exc.os_error.errno).lower() if exc.os_error.errno else "no connection"
        )  # "connection refused"
        return EndpointDownError(f"{url}: cannot connect: {said} ({exc.os_error})")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return RetryableRequestError(f"{url}: no connection within {timeouts.connect:g}s (connect timeout)")
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return RetryableRequestError(f"{url}: stream stalled (no bytes for {timeouts.stall:g}s)")
    if isinstance(exc, TimeoutError):
        total = "" if timeouts.total is None else f" after {timeouts.total:g}s"
        return RetryableRequestError(f"{url}: request timed out{total} (whole-request timeout)")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return EndpointDownError(f"{url}: connection lost mid-response (the body was cut short: {exc})")
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError | ConnectionError):
        when = "mid-response" if answered else "before a response"
        return EndpointDownError(f"{url}: connection lost {when} ({type(exc).__name__}: {exc})")
    if isinstance(exc, aiohttp.ClientResponseError):
        return RetryableRequestError(f"{url}: not a valid HTTP response ({exc.message})")
    return RetryableRequestError(f"{url}: {type(exc).__name__}: {exc}")


def is_stale(exc: BaseException) -> bool:
    """A failure that a kept-alive connection the server had closed shows: reset, broken pipe, disconnected."""
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ServerTimeoutError | TimeoutError):
        return False  # opening a socket, or waiting: not a stale one
    return isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError | ConnectionError)


def timed_out(error: BaseException) -> bool:
    """Whether a request error (as `from_exception` made it) ran out of time: stalled or past its deadline, so the
    server may still be decoding it."""
    return isinstance(error.__cause__, aiohttp.SocketTimeoutError | TimeoutError)


def holder_gone(error: BaseException) -> bool:
    """Whether a down endpoint's error says no process holds its requests any more: the connection was refused
    (nothing listens) or reset by a dying server, rather than a connect that got no answer (a partition)."""
    cause = error.__cause__
    return not isinstance(cause, aiohttp.ClientConnectorError) or isinstance(cause.os_error, ConnectionRefusedError)


def error_message(raw: bytes) -> str:
    """The message of an error body, whatever its shape (OpenAI's flat object, {"error": {...}}, plain text)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:300].decode("utf-8", "replace")
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(obj)[:300]


# How servers say a prompt does not fit: SGLang ("The input (N tokens) is longer than the model's context length (C
# tokens).", "Requested token count exceeds the model's maximum context length of C tokens."; tokenizer_manager.py
# _validate_one_request) and vLLM ("This model's maximum context length is C tokens. However, you requested ...",
# "'max_tokens' or 'max_completion_tokens' is too large: ...").
_CONTEXT = re.compile(
    r"context length|maximum context|context_length|token count exceeds|max_completion_tokens' is too large",
    re.IGNORECASE,
)


# vLLM refuses a request with tools when it was started without a tool-call parser ("auto" tool choice requires
# --enable-auto-tool-choice and --tool-call-parser to be set): the same answer for every such request.
_NO_TOOL_PARSER = re.compile(r"enable-auto-tool-choice|tool-call-parser to be set", re.IGNORECASE)


def raise_for_status(status: int, raw: bytes, url: str, *, retry_after: str | None, location: str | None) -> None:
    """Return for a 2xx; otherwise raise the status's error class."""
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        where = location or "(no Location header)"
        raise FatalEndpointError(f"{url}: HTTP {status}: the URL redirects to {where}; use that URL in the config")
    message = f"{url}: HTTP {status}: {error_message(raw)}"
    if status < 200:
        raise RetryableRequestError(f"{url}: HTTP {status}: not an answer to a request (an upgrade?)", status=status)
    if status in (401, 403):
        raise FatalEndpointError(f"{message} (check the endpoint's api_key_env)")
    if status == 404:
        if "model" in message.lower():  # vLLM: "The model `x` does not exist."; a gateway: "model not found"
            raise FatalEndpointError(
                f"{message} (generation.model names no model this server serves: its /v1/models lists them)"
            )
        raise FatalEndpointError(f"{message} (wrong URL or model name?)")
    if status in (400, 413) and _CONTEXT.search(message):
        raise ContextLengthError(message, status=status)
    if status == 400 and _NO_TOOL_PARSER.search(message):  # every request with tools gets it: the server's setup
        raise FatalEndpointError(
            f"{message} (the input has tools and this server parses no tool calls: start vLLM with "
            "--enable-auto-tool-choice --tool-call-parser NAME, SGLang with --tool-call-parser NAME)"
        )
    if status in (408, 429) or status >= 500:
        raise RetryableRequestError(message, status=status, retry_after=_seconds(retry_after))
    raise PermanentRequestError(message, status=status)


def raise_for_error_object(obj: Any, url: str) -> None:
    """A 200 whose body (or SSE event) is an error object, OpenAI's `{"object": "error", "code": N}` or
    `{"error": {...}}`: raised as its code's class (500 when it names none)."""
    if not isinstance(obj, dict):
        return
    err = obj.get("error") if "error" in obj else (obj if obj.get("object") == "error" else None)
    if err is None:
        return
    code = err.get("code") if isinstance(err, dict) else None
    status = code if isinstance(code, int) and 100 <= code < 600 else 500
    message = str(err.get("message") or err) if isinstance(err, dict) else str(err)
    raise_for_status(max(status, 400), orjson.dumps({"message": message}), url, retry_after=None, location=None)


def _seconds(retry_after: str | None) -> float | None:
    """`Retry-After` in seconds (the HTTP-date form is not used by SGLang or its router: None)."""
    try:
        return float(retry_after) if retry_after else None
    except ValueError:
        return None
