"""Preflight's judgement, pure functions of what was observed: observations in, checks out.

Only what `[expect]` (and, after `regen launch`, `[launch].args`) asks for can fail; everything else is
information. Every check is a `Check` (`{name, key, expected, actual, ok, hint, level}` as JSON): `key` is the
/server_info key actually checked (version-aware for the mamba strategy), `level` is "error" for a failed check, else
"warning" or "info". An endpoint's checks make its `EndpointReport`; both turn into JSON only through `as_json`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import Config, EndpointConfig
from ..endpoints.state import PUSHBACK_STATUSES
from ..sglang.capacity import Capacity
from ..sglang.releases import EXTRA_BUFFER_INERT_WITHOUT_RADIX, Release
from . import server_args
from .drift_hints import drift_hint

Expectation = tuple[str, Any, str]  # (name as written, expected value, source: "expect" | "launch")


@dataclasses.dataclass
class Observed:
    url: str
    reach: str = "open"  # open | port closed | timeout | error text
    auth_status: int | None = None
    health: int | str | None = None
    models: list[str] = dataclasses.field(default_factory=list)
    info: dict[str, Any] | None = None
    info_path: str = "/server_info"
    router_workers: list[str] | None = None
    probe: dict[str, Any] | None = None
    simulator: bool = False  # it answers the simulator's own GET /_sim/stats: `regen sim`, not a model
    context: int | None = None  # the served model's context length (/v1/models max_model_len, /server_info)
    vllm_version: str | None = None  # GET /version answered as vLLM's does (and /server_info did not)


# ---------------------------------------------------------------- judging (pure)


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One verdict of preflight on one server. `expected` and `actual` are what `--json` shows (any JSON value);
    `level` left empty is "info" when `ok`, else "error"; `worker` names the server behind a router it was made on."""

    name: str
    key: str | None
    _: dataclasses.KW_ONLY
    expected: Any
    actual: Any
    ok: bool
    hint: str = ""
    level: str = ""
    worker: str | None = None

    def __post_init__(self) -> None:
        if not self.level:
            object.__setattr__(self, "level", "info" if self.ok else "error")  # frozen: set once, here

    def as_json(self) -> dict[str, Any]:
        """The check in `regen preflight --json` and run.json: its fields as keys, in their order (`worker` only when
        set)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.worker is None:
            del out["worker"]
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointReport:
    """Preflight's verdict on one endpoint (and, behind a router, on each worker it lists)."""

    url: str
    reachable: bool
    checks: tuple[Check, ...]
    info: dict[str, Any]
    version: str | None = None
    workers: tuple[EndpointReport, ...] | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        """`{url, ok, reachable, version, checks, info[, workers]}`, in this order: `regen preflight --json`."""
        out = {
            "url": self.url,
            "ok": self.ok,
            "reachable": self.reachable,
            "version": self.version,
            "checks": [c.as_json() for c in self.checks],
            "info": self.info,
        }
        if self.workers is not None:
            out["workers"] = [w.as_json() for w in self.workers]
        return out


def derived_values(got: Observed) -> dict[str, Any]:
    info = got.info or {}
    spec_on = bool(info.get("speculative_algorithm"))
    return {
        "version": info.get("version"),
        "effective_max_running_requests": server_args.effective_concurrency(info),
        "speculative_decoding": spec_on,
        "spec_accept_length": server_args.spec_accept_length(info, (got.probe or {}).get("spec_accept_length"))
        if spec_on
        else None,
    }


def judge_reach(got: Observed, spec: EndpointConfig) -> list[Check]:
    if got.reach == "port closed":
        hint = "still loading weights or not started: SGLang binds its port only after loading"
        return [Check("reachable", None, expected="open", actual="port closed", ok=False, hint=hint)]
    if got.reach != "open":
        dns = "resolve" in got.reach  # preflight says "cannot resolve host ..." for a DNS failure
        hint = "check the host name in the endpoint URL" if dns else "network problem or server hung"
        return [Check("reachable", None, expected="open", actual=got.reach, ok=False, hint=hint)]
    checks = [Check("reachable", None, expected="open", actual="open", ok=True)]
    if got.auth_status in (401, 403):
        env = spec.api_key_env
        hint = (
            f"the key in ${env} was refused"
            if env and os.environ.get(env)
            else "the server wants an API key: set endpoints.api_key_env to a variable holding it"
        )
        refused = f"refused ({got.auth_status})"
        checks.append(Check("auth", None, expected="accepted", actual=refused, ok=False, hint=hint))
    return checks


def judge_basics(got: Observed, cfg: Config) -> list[Check]:
    ok = got.health == 200
    hint = "" if ok else "503: still warming up, or shutting down" if got.health == 503 else "unexpected /health"
    checks = [Check("health", None, expected=200, actual=got.health, ok=ok, hint=hint)]
    wanted = cfg.generation.model
    served = got.models or [str((got.info or {}).get("served_model_name"))]
    if wanted == "default":
        hint = "generation.model not set"
        checks.append(Check("model", "served_model_name", expected=None, actual=served, ok=True, hint=hint))
    else:
        hint = "" if wanted in served else "set generation.model to the served name (or --served-model-name)"
        if ":" in wanted and wanted not in served:
            hint = "a model name with ':' is read as base:adapter (LoRA) and refused with 400"
        ok = wanted in served
        checks.append(Check("model", "served_model_name", expected=wanted, actual=served, ok=ok, hint=hint))
    checks.append(judge_context(got, cfg))
    return checks


def judge_context(got: Observed, cfg: Config) -> Check:
    """generation.max_tokens against the served model's context length: a max_tokens at least the context leaves no
    room for any prompt (every request refused with 400), so the run would reject or stop; unknown is said."""
    max_tokens, context = cfg.generation.max_tokens, got.context
    if context is None:
        hint = "the server reports no context length (/v1/models max_model_len, /server_info context_length)"
        return Check("context length", "context_length", expected=f"> {max_tokens}", actual=None, ok=True,
                     hint=f"not checked: {hint}", level="warning")  # fmt: skip
    ok = max_tokens < context
    hint = "" if ok else (
        f"generation.max_tokens ({max_tokens}) leaves no room for a prompt in the server's context ({context} "
        f"tokens): every request would be refused; set it below the context, e.g. {context // 2}"
    )  # fmt: skip
    return Check("context length", "context_length", expected=f"> {max_tokens}", actual=context, ok=ok, hint=hint)


def judge_expect(got: Observed, expectations: list[Expectation]) -> list[Check]:
    info = got.info or {}
    version = info.get("version")
    derived = derived_values(got)
    checks = []
    for name, expected, source in expectations:
        label = f"--{name}" if source == "launch" else name
        key = server_args.resolve_key(name, info, version)
        if key in server_args.SECRET_KEYS:
            continue
        if key in server_args.DERIVED_KEYS:
            actual, present = derived.get(key), derived.get(key) is not None
        else:
            actual, present = info.get(key), key in info
        if not present:
            launched = source == "launch"  # a launcher-only flag (or one this version does not report): information
            hint = "not reported by /server_info" if launched else missing_hint(key, info, version, server_kind(got))
            checks.append(Check(label, key, expected=expected, actual=None, ok=launched, hint=hint))
            continue
        if source == "launch" and expected == "auto":
            hint = f"SGLang resolved auto to {actual}"
            checks.append(Check(label, key, expected=expected, actual=actual, ok=True, hint=hint))
            continue
        ok = server_args.same_value(key, expected, actual)
        if (
            ok
            and key in server_args.MAMBA_KEYS
            and expected in ("extra_buffer", "extra_buffer_lazy")
            and info.get("disable_radix_cache")
            and Release.of(version, EXTRA_BUFFER_INERT_WITHOUT_RADIX) >= EXTRA_BUFFER_INERT_WITHOUT_RADIX
        ):
            ok, actual = False, f"{actual} (inert: disable_radix_cache=true)"
        hint = "" if ok else drift_hint(key, expected, actual, info, version)
        if not ok and source == "launch":
            hint = f"you passed {label}={expected}, the server runs {key}={actual}: {hint}"
        checks.append(Check(label, key, expected=expected, actual=actual, ok=ok, hint=hint))
    return checks


def server_kind(got: Observed) -> str:
    """What answers at this URL, from what it answers: `simulator` (regen sim), `sglang-router`, `sglang`, `vllm`,
    or `openai-compatible` (a chat API and nothing regen can read of its configuration)."""
    if got.simulator:
        return "simulator"
    if got.router_workers is not None:
        return "sglang-router"
    if got.info is not None:
        return "sglang"
    return "vllm" if got.vllm_version is not None else "openai-compatible"


# What preflight reads of each kind of server, and what it cannot check there (docs/endpoints.md, per server kind).
CANNOT_CHECK = {
    "sglang": "",
    "simulator": "",
    "sglang-router": "its own launch flags (each worker it lists is checked instead)",
    "vllm": "[expect] (vLLM reports no server arguments), its tool-call parser, its capacity and speculative decoding",
    "openai-compatible": "[expect], the tool-call parser, capacity and speculative decoding (no /server_info)",
}


def judge_server(got: Observed) -> Check:
    """Which kind of server this is and what cannot be checked on it (information, or a warning when something
    cannot)."""
    kind = server_kind(got)
    version = (got.info or {}).get("version") or got.vllm_version
    actual = f"{kind} {version}" if version else kind
    blind = CANNOT_CHECK[kind]
    hint = f"not checked on this server: {blind}" if blind else ""
    return Check("server", None, expected=None, actual=actual, ok=True, hint=hint, level="warning" if blind else "")


def missing_hint(key: str, info: Mapping[str, Any], version: str | None, kind: str = "sglang") -> str:
    if kind == "vllm":
        return (
            "vLLM reports no server arguments: [expect] cannot be checked on it; check its launch flags yourself "
            "and leave this key out of [expect] for vLLM endpoints"
        )
    if not info:
        return "the server answered neither /server_info nor /get_server_info: nothing could be checked"
    close = difflib.get_close_matches(key, [k for k in info if isinstance(k, str)], n=1, cutoff=0.7)
    where = f"SGLang {version}" if version else "this server"
    return f"{where} does not report {key}" + (f"; did you mean {close[0]}?" if close else "")


def judge_info(got: Observed, spec: EndpointConfig, expect_keys: set[str]) -> list[Check]:
    cap = derived_values(got)["effective_max_running_requests"]
    if cap is None or "effective_max_running_requests" in expect_keys:
        return []
    dp = int((got.info or {}).get("dp_size") or 1)
    cause = server_args.capacity_of(got.info or {})
    return judge_concurrency(cap, spec, "the server runs", cause if cause.requests == cap // dp else None)


def judge_concurrency(cap: int, spec: EndpointConfig, who: str, cause: Capacity | None = None) -> list[Check]:
    """Information (a warning naming the capping flag when the config sends more than the server runs at once),
    never drift: the run still works, at the server's pace."""
    short = spec.concurrency > cap
    hint = ""
    if short and cause is not None:
        hint = f"{who} at most {cap} requests at once: {cause.hint(spec.concurrency)}"
    elif short:
        hint = (
            f"{who} at most {cap} requests at once, the rest wait in a queue: lower endpoints.concurrency to {cap} "
            "or raise --max-running-requests (hybrid models: the mamba cache caps it)"
        )
    level = "warning" if short else "info"
    expected, key = f"≥ {spec.concurrency}", "effective_max_running_requests"
    return [Check("concurrency", key, expected=expected, actual=cap, ok=True, hint=hint, level=level)]


def judge_probe(got: Observed, cfg: Config, expect_keys: set[str]) -> list[Check]:
    """What the probe completion shows: whether the reasoning comes apart from the answer, and (on a server, not a
    router) whether speculative decoding is on. A missing parser is drift only when [expect] asks for one."""
    probe = got.probe
    if probe is None:
        return []
    if "error" in probe and probe.get("status") in PUSHBACK_STATUSES:  # up and full: nothing said about its config
        hint = (
            f"refused for load {probe.get('refused', 1)} times (its queue is full: another run on this server?); "
            "the reasoning split was not checked here, and every completion is still validated"
        )
        return [
            Check("probe", None, expected="a completion", actual=probe["error"], ok=True, hint=hint, level="warning")
        ]
    if "error" in probe:
        hint = "the server cannot answer a chat request"
        return [Check("probe", None, expected="a completion", actual=probe["error"], ok=False, hint=hint)]
    must = "reasoning_parser" in expect_keys
    if not probe["content"] and not probe["reasoning"]:  # nothing to judge the reasoning split on: not drift
        hint = (
            f"{probe.get('empty', 1)} probe replies in a row had neither reasoning nor answer; the reasoning split "
            "was not checked, and the run rejects empty completions (empty_response) and retries them"
        )
        expected, actual = "a completion with text", "empty completions"
        return [
            Check(
                "thinking", "reasoning_content", expected=expected, actual=actual, ok=True, hint=hint, level="warning"
            )
        ]
    if cfg.generation.thinking:
        checks = [_separated_check(probe["content"], probe["reasoning"], must)]
    else:
        checks = [_clean_check(probe["content"], must)]
    if got.router_workers is None and not {"speculative_decoding", "spec_accept_length"} & expect_keys:
        checks.append(_speculative_check(got))
    return checks


def _separated_check(content: str, reasoning: str | None, must: bool) -> Check:
    """Thinking on: the reasoning in its own field, no </think> left in the answer."""
    separated = bool(reasoning) and "</think>" not in content
    actual = (
        f"reasoning {len(reasoning or '')} chars, answer {len(content)} chars"
        if separated
        else "reasoning inside content"
        if "</think>" in content or not reasoning
        else "?"
    )
    hint = (
        ""
        if separated
        else (
            "no --reasoning-parser (or separate_reasoning off): the client splits at "
            "</think> itself, but launch with --reasoning-parser qwen3"
        )
    )
    level = "" if separated or must else "warning"
    ok = separated or not must
    return Check("thinking", "reasoning_content", expected="separated", actual=actual, ok=ok, hint=hint, level=level)


def _clean_check(content: str, must: bool) -> Check:
    """Thinking off: no think markers in the answer."""
    clean = "</think>" not in content
    return Check(
        "thinking",
        "content",
        expected="no think markers",
        actual="clean" if clean else "</think> in content",
        ok=clean or not must,
        hint="" if clean else "thinking is off but the answer carries </think>",
    )


def _speculative_check(got: Observed) -> Check:
    """Information: the speculative algorithm and its accept length, or a nudge to turn it on."""
    spec = (got.info or {}).get("speculative_algorithm")
    accept = derived_values(got)["spec_accept_length"]
    actual = f"{spec}, accept length {accept}" if spec else "off"
    hint = "" if spec else "launch with --speculative-algorithm to decode faster"
    return Check("speculative", "speculative_algorithm", expected=None, actual=actual, ok=True, hint=hint)


def info_of(got: Observed) -> dict[str, Any]:
    info = got.info or {}
    derived = derived_values(got)
    mamba = next((k for k in server_args.MAMBA_KEYS if k in info), None)
    return {
        **derived,
        "served_models": got.models,
        "speculative_algorithm": info.get("speculative_algorithm"),
        "reasoning_parser": info.get("reasoning_parser"),
        "tool_call_parser": info.get("tool_call_parser"),
        "max_running_requests": info.get("max_running_requests"),
        "dp_size": info.get("dp_size"),
        "mamba": {"key": mamba, "value": info.get(mamba)} if mamba else None,
        "capacity": {k: info.get(k) for k in ("max_total_num_tokens", "max_req_input_len", "context_length")},
        "server_info_path": got.info_path if got.info is not None else None,
        "probe_rid": (got.probe or {}).get("rid"),
        "probe_finish_reason": (got.probe or {}).get("finish_reason"),
        "probe_attempts": (got.probe or {}).get("attempts"),
        "router_workers": got.router_workers,
        "simulator": got.simulator,
        "kind": server_kind(got),
        "context_length": got.context,
    }


def worker_checks(workers: Sequence[EndpointReport], expectations: list[Expectation]) -> list[Check]:
    """A router's own checks: every worker's server-arg checks, tagged with the worker, or why none were made."""
    if not workers:
        names = ", ".join(n for n, _, _ in expectations) or "none asked"
        hint = f"the router lists no workers: [expect] checks not made ({names})"
        return [Check("router workers", None, expected="listed at /workers", actual=[], ok=not expectations, hint=hint)]
    out = []
    for worker in workers:
        for check in worker.checks:
            if check.name in ("model", "probe", "thinking", "speculative", "concurrency"):
                continue
            tagged = dataclasses.replace(check, worker=worker.url)
            if check.name == "reachable" and not check.ok:
                names = ", ".join(n for n, _, _ in expectations)
                hint = f"the router lists it but it cannot be reached from here: not checked: {names}"
                tagged = dataclasses.replace(tagged, hint=hint, ok=not expectations)
            out.append(tagged)
    return out


def judge_tool_parser(report: EndpointReport) -> list[Check]:
    """For an input with tools: a warning per server (each worker behind a router) that has no tool-call parser
    (`tool_call_parser` null in /server_info). Such a server leaves a call in the answer's text (`<tool_call>...`)
    and never says `finish_reason: "tool_calls"`, so a text turn that calls a tool cannot be told from an answer."""
    out = []
    for server in report.workers or (report,):
        info = server.info
        if not server.reachable or info.get("server_info_path") is None or info.get("tool_call_parser"):
            continue
        hint = (
            f"{server.url}: the input has tools but the server parses no tool calls; launch SGLang with "
            "--tool-call-parser NAME (qwen25 for Qwen2.5/Qwen3, llama3, mistral, deepseekv3, ...) so a text turn "
            "that calls a tool comes back as tool_calls and is resampled"
        )
        expected = "a parser (the input has tools)"
        out.append(
            Check(
                "tool call parser",
                "tool_call_parser",
                expected=expected,
                actual=None,
                ok=True,
                hint=hint,
                level="warning",
            )
        )
    return out
