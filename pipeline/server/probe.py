"""The live thinking probe of preflight: one small chat request, and what its completion shows.

A fresh rid per attempt, prefixed `regen-probe-` (a retried rid may still be in flight: 400 duplicate; the simulator
counts probes apart from generations). As in a run (engine/dispatcher.py), a refusal for load (503 "The request
queue is full.", 429, 408) is the server's load, so it has its own budget, `client.max_endpoint_failures`, not the
`client.max_attempts` of what may be the request's fault.

An empty reply (no reasoning, no answer: the very failure a repair run exists for, a few percent of any server's
replies) says nothing about where the server puts reasoning, so it is asked again, up to `PROBE_EMPTY_TRIES` times;
only a reply with text is judged. A server that answers empty every time is reported as such (`empty`), never as a
missing reasoning parser.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from ..config import Config
from ..endpoints.retry import RetryPolicy
from ..endpoints.state import PUSHBACK_STATUSES
from ..endpoints.transport import Reply
from ..endpoints.wire import Pieces
from ..errors import RequestError, RetryableRequestError
from ..sglang.releases import spec_details_field
from .control import Control, Sleep

PROBE_RID_PREFIX = "regen-probe-"
PROBE_MAX_TOKENS = 128
PROBE_PROMPT = "What is 17 + 25? Think briefly, then answer with the number."
PROBE_EMPTY_TRIES = 5  # at 30% empty replies, five in a row come once in ~400 probes (and then only warn)


async def probe(ctl: Control, cfg: Config, version: str | None, retry: RetryPolicy, sleep: Sleep) -> dict[str, Any]:
    """One small thinking request; a fresh rid per attempt (a retried rid may still be in flight: 400 duplicate)."""
    gen = cfg.generation
    body: dict[str, Any] = {
        "model": gen.model,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "separate_reasoning": gen.separate_reasoning,
        "chat_template_kwargs": {"enable_thinking": gen.thinking},
    }
    if field := spec_details_field(version, stream=False):  # the probe's own acceptance, as a run's rows ask for it
        body[field] = True
    rids: list[str] = []

    async def once() -> dict[str, Any]:
        rids.append(f"{PROBE_RID_PREFIX}{uuid.uuid4().hex}")
        resp = await ctl.request("POST", "/v1/chat/completions", json={**body, "rid": rids[-1]}, timeout_s=300.0)
        if resp.status >= 500 or resp.status in PUSHBACK_STATUSES:
            text = resp.body[:200].decode("utf-8", "replace")
            raise RetryableRequestError(f"HTTP {resp.status}: {text}", status=resp.status)
        return _parse_probe(resp)

    failed = refused = empty = 0
    while True:
        try:
            out = await once()
            if "error" in out:  # a 4xx (an unknown model: vLLM's 404): said as it is, not asked again
                break
            if out["content"] or out["reasoning"] or empty + 1 >= PROBE_EMPTY_TRIES:
                out = {**out, "empty": empty + (0 if out["content"] or out["reasoning"] else 1)}
                break
            empty += 1
            continue
        except RetryableRequestError as exc:
            if exc.status in PUSHBACK_STATUSES:
                refused += 1
                n, budget = refused, cfg.client.max_endpoint_failures
            else:
                failed += 1
                n, budget = failed, cfg.client.max_attempts
            if n >= budget:
                out = {"error": str(exc), "status": exc.status, "refused": refused}
                break
            await sleep(retry.delay_for(n, exc.retry_after))
        except RequestError as exc:
            out = {"error": str(exc)}
            break
    return {**out, "rid": rids[-1] if rids else None, "attempts": len(rids)}


def _parse_probe(resp: Reply) -> dict[str, Any]:
    try:
        obj = orjson.loads(resp.body)
    except orjson.JSONDecodeError:
        raise RetryableRequestError(f"HTTP {resp.status}: invalid JSON in the probe response") from None
    if resp.status != 200 or not isinstance(obj, dict) or not obj.get("choices"):
        message = obj.get("message") or obj.get("error") if isinstance(obj, dict) else obj
        return {"error": f"HTTP {resp.status}: {str(message)[:300]}", "status": resp.status}
    pieces = Pieces()  # the one reader of a completion (endpoints/wire.py): reasoning_content or vLLM's reasoning
    try:
        pieces.take_body(obj)
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise RetryableRequestError(
            f"HTTP {resp.status}: not a chat completion in the probe response: {exc!r}"
        ) from None
    wire = pieces.result()
    return {
        "content": wire.content,
        "reasoning": wire.reasoning or "",
        "finish_reason": wire.finish_reason or None,
        "spec_accept_length": wire.spec_accept_length,
        "usage": obj.get("usage") or {},
    }
