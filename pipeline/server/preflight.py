"""Preflight: is each endpoint the server the config says it is?

For one endpoint, `preflight_endpoint` gathers observations over the control plane (reachability, auth, /health,
/v1/models, the resolved /server_info, a live thinking probe); `checks` judges them with pure functions. Only what
`[expect]` (and, after `regen launch`, `[launch].args`) asks for can fail; everything else preflight learns
(speculative decoding on or off, accept length, capacity) is information. Behind sglang-router, whose own
/get_server_info describes the router, each worker listed at /workers is checked in turn.

Every check is a `checks.Check`, `{name, key, expected, actual, ok, hint, level}` in JSON: `key` is the /server_info
key actually checked (version-aware for the mamba strategy), `level` is "error" for a failed check, else "warning" or
"info". An endpoint's checks make an `EndpointReport` (`check_endpoint`, what the run's gate reads); both become JSON
only in what `preflight_endpoint` and `preflight` return (`regen preflight --json`, run.json). The table is
`format_preflight`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

from ..config import SIM_URL, ClientConfig, Config, EndpointConfig, api_key_for
from ..endpoints import failures
from ..endpoints.fleet import NO_SIMULATOR, StartSimulator
from ..endpoints.retry import RetryPolicy
from ..endpoints.transport import Transport
from ..errors import ConfigError, EndpointDownError, RegenError, RetryableRequestError
from ..sglang.resolution import StartupRefused
from . import server_args
from .checks import (
    Check,
    EndpointReport,
    Expectation,
    Observed,
    info_of,
    judge_basics,
    judge_concurrency,
    judge_expect,
    judge_info,
    judge_probe,
    judge_reach,
    judge_server,
    judge_tool_parser,
    worker_checks,
)
from .control import Control, Sleep, UnresolvedHost, control_plane, retrying
from .probe import PROBE_PROMPT, PROBE_RID_PREFIX
from .probe import probe as probe_server

__all__ = [
    "PROBE_PROMPT",
    "PROBE_RID_PREFIX",
    "EndpointReport",
    "check_endpoint",
    "fingerprint_changes",
    "format_preflight",
    "preflight",
    "preflight_endpoint",
    "server_fingerprint",
]


# ---------------------------------------------------------------- observing


async def _gather(ctl: Control, cfg: Config, probe: bool, retry: RetryPolicy, sleep: Sleep) -> Observed:
    got = Observed(ctl.url)
    attempts = cfg.client.max_attempts

    async def get(path: str) -> tuple[int, Any]:
        async def once() -> tuple[int, Any]:
            status, body = await ctl.json(path)
            if status >= 500:
                raise RetryableRequestError(f"{ctl.url}{path}: HTTP {status}", status=status)
            return status, body

        result: tuple[int, Any] = await retrying(once, attempts, retry, sleep)
        return result

    try:
        status, body = await get("/v1/models")
    except UnresolvedHost as exc:
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
    cards = [m for m in (body or {}).get("data") or [] if isinstance(m, dict)]
    got.models = [str(m.get("id")) for m in cards]
    got.health = await _health(get)
    got.info, got.info_path = await _server_info(get)
    got.context = _context(cards, got.info, cfg.generation.model)
    if got.info is None:
        got.vllm_version = await _vllm_version(get, cards)
    got.simulator = await _is_simulator(ctl)
    if _is_router(got.info):
        got.router_workers = await _router_workers(get)
    if probe:
        got.probe = await probe_server(ctl, cfg, (got.info or {}).get("version"), retry, sleep)
        if got.info is not None and got.router_workers is None:
            _, fresh = await get(got.info_path)  # avg_spec_accept_length now counts the probe
            if isinstance(fresh, dict):
                got.info["internal_states"] = fresh.get("internal_states")
    return got


async def _vllm_version(get: Callable[[str], Awaitable[tuple[int, Any]]], cards: list[dict[str, Any]]) -> str | None:
    """vLLM's version, where the server is vLLM: it answers GET /version with {"version": ...} and owns its models
    ("owned_by": "vllm"); None for any other server."""
    if not any(c.get("owned_by") == "vllm" for c in cards):
        return None
    try:
        status, body = await get("/version")
    except RetryableRequestError:
        return "unknown"
    return str(body["version"]) if status == 200 and isinstance(body, dict) and body.get("version") else "unknown"


def _context(cards: list[dict[str, Any]], info: dict[str, Any] | None, model: str) -> int | None:
    """The served model's context length: its /v1/models card's `max_model_len` (vLLM; SGLang too), else
    /server_info's `context_length` when the server set one."""
    lengths = [c.get("max_model_len") for c in cards if c.get("id") == model] or [c.get("max_model_len") for c in cards]
    for value in [*lengths, (info or {}).get("context_length")]:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


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


async def _is_simulator(ctl: Control) -> bool:
    """Whether the server is regen's simulator. Its /server_info is SGLang's to the key (that is its job), so the
    tell is a route only it has: GET /_sim/stats answering its counters. Asked once, never retried: a real server
    answers 404, and a failure here says nothing about the server's health. Asked `brief`: the whole body holds a
    map entry per prompt served, and a rerun's preflight parsing it held ~100 MB more at 902K rows (issue 40)."""
    try:
        status, body = await ctl.json("/_sim/stats?brief=1")
    except RegenError:
        return False
    return status == 200 and isinstance(body, dict) and "generations_total" in body


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
    transport: Transport | None = None,
) -> dict[str, Any]:
    """Check one endpoint: {url, ok, reachable, version, checks, info[, workers]}. `transport`: the run's
    control-plane connections to it, when a run checks an endpoint it holds.

    `extra_expect` (flag → value, e.g. the launched args) is checked like [expect]; a failure reads
    "you passed X=a, the server runs X=b". Behind sglang-router, each listed worker is checked too.
    """
    report = await check_endpoint(
        url, cfg, api_key=api_key, probe=probe, extra_expect=extra_expect, retry=retry, sleep=sleep, transport=transport
    )
    return report.as_json()


async def check_endpoint(
    url: str,
    cfg: Config,
    *,
    api_key: str | None = None,
    probe: bool = True,
    extra_expect: Mapping[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    sleep: Sleep = asyncio.sleep,
    transport: Transport | None = None,
) -> EndpointReport:
    """`preflight_endpoint` as a record (what the gate reads); JSON only in what preflight_endpoint returns."""
    retry = retry or RetryPolicy(cfg.client.backoff_base_s, cfg.client.backoff_max_s)
    ep = _endpoint_config(cfg, url)
    expectations = _expectations(cfg, extra_expect)
    async with control_plane(url, cfg.client, api_key, transport) as ctl:
        got = await _gather(ctl, cfg, probe, retry, sleep)
    checks = judge_reach(got, ep)
    reachable = got.reach == "open"
    if not all(c.ok for c in checks):
        return EndpointReport(url, reachable, tuple(checks), info_of(got))
    expect_keys = {server_args.server_key(name) for name, _, _ in expectations}
    checks += [judge_server(got), *judge_basics(got, cfg)]
    workers = None
    if got.router_workers is None:
        checks += judge_expect(got, expectations) + judge_info(got, ep, expect_keys)
    else:
        workers = await _check_workers(got.router_workers, cfg, api_key, extra_expect, retry, sleep)
        checks += worker_checks(workers, expectations)
        caps = [w.info["effective_max_running_requests"] for w in workers if w.reachable]
        if caps and None not in caps and "effective_max_running_requests" not in expect_keys:
            checks += judge_concurrency(sum(caps), ep, "the router's workers together run")
    checks += judge_probe(got, cfg, expect_keys)
    version = (got.info or {}).get("version")
    info = info_of(got)
    info["simulator"] = got.simulator or any(w.info.get("simulator") for w in workers or ())
    return EndpointReport(url, reachable, tuple(checks), info, version, workers)


async def _check_workers(
    urls: list[str],
    cfg: Config,
    api_key: str | None,
    extra: Mapping[str, Any] | None,
    retry: RetryPolicy,
    sleep: Sleep,
) -> tuple[EndpointReport, ...]:
    tasks = [
        check_endpoint(u, cfg, api_key=api_key, probe=False, extra_expect=extra, retry=retry, sleep=sleep) for u in urls
    ]
    return tuple(await asyncio.gather(*tasks))


async def preflight(
    cfg: Config,
    *,
    urls: list[str] | None = None,
    probe: bool = True,
    tools: bool = False,
    simulator: StartSimulator | None = None,
) -> dict[str, Any]:
    """Preflight every endpoint at once: {ok, endpoints: [...]}. `url = "sim"` endpoints start the embedded
    simulator with their sim_args for the duration (`simulator`, which the composition root supplies: without it
    they are a ConfigError); `urls` replaces the config's endpoints. `tools`: the input has tools, so a server that
    parses no tool calls fails (a warning with `client.allow_no_tool_parser`)."""
    endpoints = [EndpointConfig(url=u) for u in urls] if urls else list(cfg.endpoints)
    async with AsyncExitStack() as stack:
        jobs = []
        for ep in endpoints:
            url = ep.url
            if url == SIM_URL:
                url, refused = await _start_sim(stack, ep, simulator)
                if refused:
                    jobs.append(_failed_start(ep, refused))
                    continue
            local = dataclasses.replace(cfg, endpoints=(dataclasses.replace(ep, url=url),))
            api_key = api_key_for(ep.api_key_env, "api_key_env")
            jobs.append(check_endpoint(url, local, api_key=api_key, probe=probe))
        reports = list(await asyncio.gather(*jobs))
    if tools:
        reports = [_with_tool_parser(r, allowed=cfg.client.allow_no_tool_parser) for r in reports]
    return {"ok": all(r.ok for r in reports), "endpoints": [r.as_json() for r in reports]}


def _with_tool_parser(report: EndpointReport, *, allowed: bool) -> EndpointReport:
    """The report with a check per server that parses no tool calls: failing, as `regen run` refuses to start on
    it, unless the user allowed it (then a warning)."""
    missing = judge_tool_parser(report)
    if not allowed:
        missing = [dataclasses.replace(c, ok=False, level="error") for c in missing]
    if not missing:
        return report
    return dataclasses.replace(report, checks=report.checks + tuple(missing))


async def _start_sim(stack: AsyncExitStack, spec: EndpointConfig, simulator: StartSimulator | None) -> tuple[str, str]:
    """(the embedded simulator's URL, ""), or ("", SGLang's startup message) when it refuses these sim_args."""
    if simulator is None:
        raise ConfigError(NO_SIMULATOR)
    try:
        return str(await stack.enter_async_context(simulator(spec.sim_args))), ""
    except StartupRefused as exc:
        return "", f"{exc.kind}: {exc.message}"


async def _failed_start(spec: EndpointConfig, message: str) -> EndpointReport:
    check = Check(
        "start", None, expected="the simulator starts", actual=message, ok=False, hint="fix endpoints.sim_args"
    )
    return EndpointReport(spec.url, False, (check,), {})


async def server_fingerprint(
    url: str, api_key: str | None = None, client: ClientConfig | None = None, transport: Transport | None = None
) -> dict[str, Any]:
    """The subset of /server_info that says "same configuration": compare two with `fingerprint_changes`.
    Raises EndpointDownError (port closed), FatalEndpointError (auth) or RetryableRequestError."""
    async with control_plane(url, client or ClientConfig(), api_key, transport) as ctl:
        for path in ("/server_info", "/get_server_info"):
            status, body = await ctl.json(path)
            if status in (401, 403):  # the one map says what a refused key is
                failures.raise_for_status(status, b"", f"{url}{path}", retry_after=None, location=None)
            if status == 200 and isinstance(body, dict):
                fp = {k: body[k] for k in server_args.FINGERPRINT_KEYS if k in body}
                fp["effective_max_running_requests"] = server_args.effective_concurrency(body)
                return fp
    raise RetryableRequestError(f"{url}: no /server_info", status=status)


def fingerprint_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Human lines "key: a → b" for every fingerprint key that differs."""
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k)!r} → {after.get(k)!r}" for k in keys if before.get(k) != after.get(k)]


def format_preflight(result: Mapping[str, Any]) -> str:
    """A table per endpoint: check, expected, actual, verdict, hint."""
    blocks = []
    for ep in result.get("endpoints", []):
        head = f"{ep['url']}  {'OK' if ep['ok'] else 'FAILED'}" + (
            f"  (SGLang {ep['version']})" if ep.get("version") else ""
        )
        if (ep.get("info") or {}).get("simulator"):
            head += "  SIMULATOR: regen's simulator, whose completions are filler text"
        rows = [("check", "expected", "actual", "verdict", "hint")]
        for c in ep["checks"]:
            failed = "DRIFT" if ep.get("reachable", True) else "DOWN"  # a server not reached said nothing to differ
            verdict = failed if not c["ok"] else "warn" if c.get("level") == "warning" else "ok"
            name = c["name"] if c["key"] in (None, c["name"]) else f"{c['name']} [{c['key']}]"
            if c.get("worker"):
                name = f"{c['worker']}: {name}"
            rows.append((name, show(c["expected"]), show(c["actual"]), verdict, c["hint"] or ""))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
        blocks.append("\n".join([head, *[line.rstrip() for line in lines]]))
    return "\n\n".join([*blocks, _verdict(result)])


def _verdict(result: Mapping[str, Any]) -> str:
    """The last line: passed, the servers differ from the config, or some cannot be reached (not drift)."""
    if result.get("ok"):
        return "preflight passed"
    eps = result.get("endpoints", [])
    down = [ep["url"] for ep in eps if not ep.get("reachable", True)]
    drift = [ep for ep in eps if not ep["ok"] and ep.get("reachable", True)]
    parts = ["the servers differ from the config"] if drift else []
    if down:
        parts.append(f"{len(down)} of {len(eps)} endpoints cannot be reached ({', '.join(down[:4])})")
    return "preflight FAILED: " + ("; ".join(parts) or "the servers differ from the config")


def show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)
