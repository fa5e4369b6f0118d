"""Preflight: is each endpoint the server the config says it is?

For one endpoint, `preflight_endpoint` gathers observations over the control plane (reachability, auth, /health,
/v1/models, the resolved /server_info, a live thinking probe); `verdicts` judges them with pure functions. Only what
`[expect]` (and, after `regen launch`, `[launch].args`) asks for can fail; everything else preflight learns
(speculative decoding on or off, accept length, capacity) is information. Behind sglang-router, whose own
/get_server_info describes the router, each worker listed at /workers is checked in turn.

Every check is `{name, key, expected, actual, ok, hint, level}`: `key` is the /server_info key actually checked
(version-aware for the mamba strategy), `level` is "error" for a failed check, else "warning" or "info".
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx

from ..config import ClientConfig, Config, EndpointConfig
from ..endpoints.retry import RetryPolicy
from ..endpoints.state import PUSHBACK_STATUSES
from ..errors import EndpointDownError, FatalEndpointError, RequestError, RetryableRequestError
from . import server_args
from .checks import (
    Expectation,
    Observed,
    format_preflight,
    info_of,
    judge_basics,
    judge_concurrency,
    judge_expect,
    judge_info,
    judge_probe,
    judge_reach,
    make_check,
    worker_checks,
)

__all__ = [
    "PROBE_PROMPT",
    "PROBE_RID_PREFIX",
    "fingerprint_changes",
    "format_preflight",
    "preflight",
    "preflight_endpoint",
    "server_fingerprint",
]

PROBE_RID_PREFIX = "regen-probe-"
PROBE_MAX_TOKENS = 128
PROBE_PROMPT = "What is 17 + 25? Think briefly, then answer with the number."

Sleep = Callable[[float], Awaitable[None]]


# ---------------------------------------------------------------- the control plane (one httpx client)


class _Control:
    """Small GETs and one probe POST to one server; transport failures become our errors here and only here."""

    def __init__(self, url: str, client: ClientConfig, api_key: str | None):
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(connect=client.connect_timeout_s, read=60.0, write=30.0, pool=30.0)
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=2)
        # Plain-HTTP endpoints need no CA bundle: loading one costs ~0.15 s per client, at every start.
        verify = not self.url.startswith("http://")
        self.http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, limits=limits, verify=verify)

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            if _is_dns_failure(exc):
                raise _UnresolvedHost(f"cannot resolve host {self.http.base_url.host!r} ({exc})") from None
            raise EndpointDownError(f"{self.url}: port closed ({exc})") from None
        except httpx.TimeoutException as exc:
            raise RetryableRequestError(f"{self.url}{path}: timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise RetryableRequestError(f"{self.url}{path}: {type(exc).__name__}: {exc}") from None

    async def json(self, path: str) -> tuple[int, Any]:
        """(status, parsed body or None) for a GET."""
        resp = await self.request("GET", path)
        try:
            return resp.status_code, resp.json() if resp.content else None
        except ValueError:
            return resp.status_code, None


class _UnresolvedHost(EndpointDownError):
    """The host name does not resolve: a typo or a node that is gone, not a server still loading its weights."""


def _is_dns_failure(exc: BaseException) -> bool:
    """Whether a connect error comes from name resolution (socket.gaierror somewhere in its chain)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@asynccontextmanager
async def _control(url: str, client: ClientConfig, api_key: str | None) -> AsyncIterator[_Control]:
    ctl = _Control(url, client, api_key)
    async with ctl.http:
        yield ctl


async def _retrying(fn: Callable[[], Awaitable[Any]], attempts: int, policy: RetryPolicy, sleep: Sleep) -> Any:
    """Run `fn`, retrying transient failures (timeouts, resets, 5xx) with the run's retry policy."""
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return await fn()
        except RetryableRequestError as exc:
            if attempt >= attempts:
                raise
            await sleep(policy.delay_for(attempt, exc.retry_after))
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- observing


async def _gather(ctl: _Control, cfg: Config, probe: bool, retry: RetryPolicy, sleep: Sleep) -> Observed:
    got = Observed(ctl.url)
    attempts = cfg.client.max_attempts

    async def get(path: str) -> tuple[int, Any]:
        async def once() -> tuple[int, Any]:
            status, body = await ctl.json(path)
            if status >= 500:
                raise RetryableRequestError(f"{ctl.url}{path}: HTTP {status}", status=status)
            return status, body

        return await _retrying(once, attempts, retry, sleep)

    try:
        status, body = await get("/v1/models")
    except _UnresolvedHost as exc:
        got.reach = str(exc)
        return got
    except EndpointDownError:
        got.reach = "port closed"
        return got
    except RetryableRequestError as exc:
        got.reach = str(exc)
        return got
    got.auth_status = status
    if status in (401, 403):
        return got
    got.models = [str(m.get("id")) for m in (body or {}).get("data") or [] if isinstance(m, dict)]
    got.health = await _health(get)
    got.info, got.info_path = await _server_info(get)
    if _is_router(got.info):
        got.router_workers = await _router_workers(get)
    if probe:
        got.probe = await _probe(ctl, cfg, got, retry, sleep)
        if got.info is not None and got.router_workers is None:
            _, fresh = await get(got.info_path)  # avg_spec_accept_length now counts the probe
            if isinstance(fresh, dict):
                got.info["internal_states"] = fresh.get("internal_states")
    return got


async def _health(get: Callable[[str], Awaitable[tuple[int, Any]]]) -> int | str:
    try:
        status, _ = await get("/health")
        return status
    except RetryableRequestError as exc:
        return exc.status or str(exc)


async def _server_info(get: Callable[[str], Awaitable[tuple[int, Any]]]) -> tuple[dict[str, Any] | None, str]:
    """/server_info, or /get_server_info (older SGLang; sglang-router answers only the old name)."""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, body = await get(path)
        except RetryableRequestError:
            continue
        if status == 200 and isinstance(body, dict):
            return body, path
    return None, "/server_info"


def _is_router(info: Mapping[str, Any] | None) -> bool:
    if not info:
        return False
    return "router_manager" in info or ("model_path" not in info and "workers_count" in info)


async def _router_workers(get: Callable[[str], Awaitable[tuple[int, Any]]]) -> list[str]:
    """Worker URLs from sglang-router's GET /workers ({"workers": [{"url": ...}]}), or [] if it lists none."""
    try:
        status, body = await get("/workers")
    except RetryableRequestError:
        return []
    rows = body.get("workers", []) if isinstance(body, dict) else body if isinstance(body, list) else []
    urls = [row.get("url") if isinstance(row, dict) else row for row in rows]
    return [str(u) for u in urls if u] if status == 200 else []


async def _probe(ctl: _Control, cfg: Config, got: Observed, retry: RetryPolicy, sleep: Sleep) -> dict[str, Any]:
    """One small thinking request; a fresh rid per attempt (a retried rid may still be in flight: 400 duplicate)."""
    gen = cfg.generation
    version = (got.info or {}).get("version")
    body: dict[str, Any] = {
        "model": gen.model,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "separate_reasoning": gen.separate_reasoning,
        "chat_template_kwargs": {"enable_thinking": gen.thinking},
    }
    v = server_args.version_tuple(version)
    if v is not None and v >= (0, 5, 14):
        body["return_meta_info"] = True
    rids: list[str] = []

    async def once() -> dict[str, Any]:
        rids.append(f"{PROBE_RID_PREFIX}{uuid.uuid4().hex}")
        resp = await ctl.request("POST", "/v1/chat/completions", json={**body, "rid": rids[-1]}, timeout=300.0)
        if resp.status_code >= 500 or resp.status_code in PUSHBACK_STATUSES:
            raise RetryableRequestError(f"HTTP {resp.status_code}: {resp.text[:200]}", status=resp.status_code)
        return _parse_probe(resp)

    # As in a run (engine/dispatcher.py): a refusal for load (503 queue full, 429, 408) is the server's load, so it
    # has its own budget (max_endpoint_failures), not the attempts of what may be the request's fault.
    failed = refused = 0
    while True:
        try:
            out = await once()
            break
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


def _parse_probe(resp: httpx.Response) -> dict[str, Any]:
    try:
        obj = resp.json()
    except ValueError:
        raise RetryableRequestError(f"HTTP {resp.status_code}: invalid JSON in the probe response") from None
    if resp.status_code != 200 or not isinstance(obj, dict) or not obj.get("choices"):
        message = obj.get("message") or obj.get("error") if isinstance(obj, dict) else obj
        return {"error": f"HTTP {resp.status_code}: {str(message)[:300]}", "status": resp.status_code}
    choice = obj["choices"][0]
    message = choice.get("message") or {}
    meta = choice.get("meta_info") or {}
    spec = (obj.get("sglext") or {}).get("spec_tokens_details") or {}
    accept = meta.get("spec_accept_length") or spec.get("spec_accept_length") or spec.get("accept_length")
    return {
        "content": message.get("content") or "",
        "reasoning": message.get("reasoning_content") or "",
        "finish_reason": choice.get("finish_reason"),
        "spec_accept_length": accept,
        "usage": obj.get("usage") or {},
    }


# ---------------------------------------------------------------- public API


def _expectations(cfg: Config, extra_expect: Mapping[str, Any] | None) -> list[Expectation]:
    out: list[Expectation] = [(k, v, "expect") for k, v in cfg.expect.items()]
    seen = {(server_args.server_key(k), repr(v)) for k, v, _ in out}
    for k, v in (extra_expect or {}).items():
        if (server_args.server_key(k), repr(v)) not in seen:
            out.append((k, v, "launch"))
    return out


def _endpoint_config(cfg: Config, url: str) -> EndpointConfig:
    for spec in cfg.endpoints:
        if spec.url.rstrip("/") == url.rstrip("/"):
            return spec
    return EndpointConfig(url=url)


async def preflight_endpoint(
    url: str,
    cfg: Config,
    *,
    api_key: str | None = None,
    probe: bool = True,
    extra_expect: Mapping[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    sleep: Sleep = asyncio.sleep,
) -> dict[str, Any]:
    """Check one endpoint: {url, ok, reachable, version, checks, info[, workers]}.

    `extra_expect` (flag → value, e.g. the launched args) is checked like [expect]; a failure reads
    "you passed X=a, the server runs X=b". Behind sglang-router, each listed worker is checked too.
    """
    retry = retry or RetryPolicy(cfg.client.backoff_base_s, cfg.client.backoff_max_s)
    ep = _endpoint_config(cfg, url)
    expectations = _expectations(cfg, extra_expect)
    async with _control(url, cfg.client, api_key) as ctl:
        got = await _gather(ctl, cfg, probe, retry, sleep)
    checks = judge_reach(got, ep)
    result: dict[str, Any] = {
        "url": url,
        "ok": False,
        "reachable": got.reach == "open",
        "version": None,
        "checks": checks,
        "info": info_of(got),
    }
    if not all(c["ok"] for c in checks):
        return result
    expect_keys = {server_args.server_key(name) for name, _, _ in expectations}
    checks += judge_basics(got, cfg)
    if got.router_workers is None:
        checks += judge_expect(got, expectations) + judge_info(got, ep, expect_keys)
    else:
        result["workers"] = await _check_workers(got.router_workers, cfg, api_key, extra_expect, retry, sleep)
        checks += worker_checks(result["workers"], expectations)
        caps = [w["info"]["effective_max_running_requests"] for w in result["workers"] if w["reachable"]]
        if caps and None not in caps and "effective_max_running_requests" not in expect_keys:
            checks += judge_concurrency(sum(caps), ep, "the router's workers together run")
    checks += judge_probe(got, cfg, expect_keys)
    result["version"] = (got.info or {}).get("version")
    result["ok"] = all(c["ok"] for c in checks)
    return result


async def _check_workers(
    urls: list[str],
    cfg: Config,
    api_key: str | None,
    extra: Mapping[str, Any] | None,
    retry: RetryPolicy,
    sleep: Sleep,
) -> list[dict[str, Any]]:
    tasks = [
        preflight_endpoint(u, cfg, api_key=api_key, probe=False, extra_expect=extra, retry=retry, sleep=sleep)
        for u in urls
    ]
    return list(await asyncio.gather(*tasks))


async def preflight(cfg: Config, *, urls: list[str] | None = None, probe: bool = True) -> dict[str, Any]:
    """Preflight every endpoint at once: {ok, endpoints: [...]}. `url = "sim"` endpoints start the embedded
    simulator with their sim_args for the duration; `urls` replaces the config's endpoints."""
    endpoints = [EndpointConfig(url=u) for u in urls] if urls else list(cfg.endpoints)
    async with AsyncExitStack() as stack:
        jobs = []
        for ep in endpoints:
            url = ep.url
            if url == "sim":
                url, refused = await _start_sim(stack, ep)
                if refused:
                    jobs.append(_failed_start(ep, refused))
                    continue
            local = dataclasses.replace(cfg, endpoints=(dataclasses.replace(ep, url=url),))
            api_key = os.environ.get(ep.api_key_env) if ep.api_key_env else None
            jobs.append(preflight_endpoint(url, local, api_key=api_key, probe=probe))
        results = list(await asyncio.gather(*jobs))
    return {"ok": all(r["ok"] for r in results), "endpoints": results}


async def _start_sim(stack: AsyncExitStack, spec: EndpointConfig) -> tuple[str, str]:
    """(the embedded simulator's URL, ""), or ("", SGLang's startup message) when it refuses these sim_args."""
    from ..sim import SimConfig, SimStartupError, serve  # only imported when a config asks for the simulator

    try:
        return str(await stack.enter_async_context(serve(SimConfig.from_argv(list(spec.sim_args))))), ""
    except SimStartupError as exc:
        return "", f"{exc.kind}: {exc.message}"


async def _failed_start(spec: EndpointConfig, message: str) -> dict[str, Any]:
    check = make_check("start", None, "the simulator starts", message, False, "fix endpoints.sim_args")
    return {"url": spec.url, "ok": False, "reachable": False, "version": None, "checks": [check], "info": {}}


async def server_fingerprint(url: str, api_key: str | None = None, client: ClientConfig | None = None) -> dict:
    """The subset of /server_info that says "same configuration": compare two with `fingerprint_changes`.
    Raises EndpointDownError (port closed), FatalEndpointError (auth) or RetryableRequestError."""
    async with _control(url, client or ClientConfig(), api_key) as ctl:
        for path in ("/server_info", "/get_server_info"):
            status, body = await ctl.json(path)
            if status in (401, 403):
                raise FatalEndpointError(f"{url}{path}: HTTP {status} (check the endpoint's api_key_env)")
            if status == 200 and isinstance(body, dict):
                fp = {k: body[k] for k in server_args.FINGERPRINT_KEYS if k in body}
                fp["effective_max_running_requests"] = server_args.effective_concurrency(body)
                return fp
    raise RetryableRequestError(f"{url}: no /server_info", status=status)


def fingerprint_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Human lines "key: a → b" for every fingerprint key that differs."""
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k)!r} → {after.get(k)!r}" for k in keys if before.get(k) != after.get(k)]
