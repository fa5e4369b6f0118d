"""What regen knows about SGLang's server arguments across versions (shared/SGLANG.md sections 4-6).

Pure data and pure functions, of three kinds:
- key names and values: a launch flag or an `[expect]` key → the `/server_info` key that reports it, version-aware
  (the mamba strategy is `mamba_scheduler_strategy` up to 0.5.12 and `mamba_radix_cache_strategy` from 0.5.14),
  and when a reported value satisfies an expectation (`same_value`);
- what a `/server_info` says beyond its keys: the configuration fingerprint, the effective concurrency, the
  speculative accept length;
- known-bad launch combinations for a target version (`known_bad`), found before anything starts.
Why SGLang reports a value other than the one asked for is drift_hints.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..sim.args import SimStartupError, architecture_of, is_hybrid, resolve
from ..sim.capacity import Capacity, capacity

MAMBA_OLD = "mamba_scheduler_strategy"
MAMBA_NEW = "mamba_radix_cache_strategy"
MAMBA_KEYS = (MAMBA_OLD, MAMBA_NEW)
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"

# Flags whose argparse destination is not the flag name with dashes turned into underscores.
_FLAG_ALIASES = {"model": "model_path", "tp": "tp_size", "dp": "dp_size", "ep": "ep_size", "pp": "pp_size"}
# Launch args that say nothing about the running server (or must never be echoed).
SECRET_KEYS = frozenset({"api_key", "admin_api_key", "hf_token"})
_NOT_SERVER_ARGS = frozenset({"config"})
# Values preflight derives instead of reading one /server_info key; "at least" values pass when actual >= expected.
DERIVED_KEYS = frozenset({"effective_max_running_requests", "spec_accept_length", "speculative_decoding", "version"})
AT_LEAST_KEYS = frozenset({"effective_max_running_requests", "spec_accept_length"})
# Values SGLang reports under another name without changing anything.
_EQUIVALENT = {("speculative_algorithm", "NEXTN"): "EAGLE"}
_HYBRID_NAMES = ("qwen3.5", "qwen3.6", "qwen3_5", "qwen3-next", "nemotron-h", "falcon-h1", "granite-4")
_EXTRA_BUFFER_NAMES = ("qwen3.5", "qwen3.6", "qwen3_5", "qwen3-next")


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    """'0.5.10.post1' → (0, 5, 10); None or an unparsable string → None."""
    if not version:
        return None
    found = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not found:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def mamba_key(version: str | None) -> str | None:
    """The /server_info key of the mamba strategy for `version` (None when the version is unknown)."""
    v = version_tuple(version)
    if v is None:
        return None
    return MAMBA_OLD if v < (0, 5, 14) else MAMBA_NEW


def server_key(name: str) -> str:
    """A launch flag (`model-path`, `--tp`) or an [expect] key → its server_args name."""
    key = name.lstrip("-").replace("-", "_")
    return _FLAG_ALIASES.get(key, key)


def resolve_key(name: str, info: Mapping[str, Any], version: str | None) -> str:
    """The /server_info key that answers an expectation named `name` on this server.

    Either mamba name checks whichever of the two the server reports, preferring the one its version uses.
    """
    key = server_key(name)
    if key not in MAMBA_KEYS:
        return key
    by_version = mamba_key(version)
    present = [k for k in MAMBA_KEYS if k in info]
    if by_version in present or (by_version and not present):
        return by_version
    return present[0] if present else key


def same_value(key: str, expected: Any, actual: Any) -> bool:
    """Whether a resolved value satisfies an expectation: types normalised (TOML int vs float, "true" vs True)."""
    if key in AT_LEAST_KEYS and _is_number(expected) and _is_number(actual):
        return float(actual) >= float(expected)
    alias = _EQUIVALENT.get((key, expected.upper())) if isinstance(expected, str) else None
    if alias is not None and alias == actual:
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return _as_bool(expected) is not None and _as_bool(expected) == _as_bool(actual)
    if _is_number(expected) and _is_number(actual):
        return float(expected) == float(actual)
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(expected) == len(actual) and all(
            same_value(key, e, a) for e, a in zip(expected, actual, strict=True)
        )
    if expected is None or actual is None:
        return expected is None and actual is None
    return str(expected) == str(actual)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    if value is None:
        return False
    if _is_number(value):
        return bool(value)
    return None


def looks_hybrid(model_path: str) -> bool:
    """Whether a model path names a hybrid (mamba / linear-attention) architecture, by its name."""
    return any(tag in model_path.lower() for tag in _HYBRID_NAMES)


def _supports_extra_buffer(model_path: str) -> bool:
    return any(tag in model_path.lower() for tag in _EXTRA_BUFFER_NAMES)


def spec_v2_enabled(env: Mapping[str, str], version: tuple[int, int, int]) -> bool:
    """SGLANG_ENABLE_SPEC_V2 as SGLang ≤0.5.12 reads it (default off before 0.5.12, on in 0.5.12)."""
    raw = env.get(SPEC_V2_ENV)
    if raw is None:
        return version >= (0, 5, 12)
    return raw.strip().lower() in ("1", "true", "yes", "on")


# ---------------------------------------------------------------- reading /server_info

# The /server_info keys that make a server "the same configuration" across a restart.
FINGERPRINT_KEYS = (
    "version",
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "pp_size",
    "ep_size",
    "context_length",
    "max_running_requests",
    "page_size",
    "attention_backend",
    "disable_radix_cache",
    "disable_overlap_schedule",
    MAMBA_OLD,
    MAMBA_NEW,
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "reasoning_parser",
    "tool_call_parser",
)


def effective_concurrency(info: Mapping[str, Any]) -> int | None:
    """The real concurrency cap: internal_states[].effective_max_running_requests_per_dp over the DP ranks."""
    dp = int(info.get("dp_size") or 1)
    states = info.get("internal_states") or []
    per = [s.get("effective_max_running_requests_per_dp") for s in states if isinstance(s, dict)]
    caps = [int(p) for p in per if isinstance(p, int | float) and not isinstance(p, bool)]
    if caps:
        return sum(caps) if len(caps) == dp else caps[0] * dp
    computed = capacity_of(info).requests  # a server that does not report it: computed from its resolved args
    return computed * dp if isinstance(computed, int) else None


def capacity_of(info: Mapping[str, Any]) -> Capacity:
    """The capacity SGLang's own rule gives a server with this /server_info, and the flag that caps it."""
    version = str(info.get("version") or "0.5.23")
    return capacity(info, version, hybrid=looks_hybrid(str(info.get("model_path") or "")))


def spec_accept_length(info: Mapping[str, Any], from_response: Any = None) -> float | None:
    """The mean accept length: /server_info internal_states[].avg_spec_accept_length, else a response's."""
    values = [s.get("avg_spec_accept_length") for s in info.get("internal_states") or [] if isinstance(s, dict)]
    numbers = [float(x) for x in values if isinstance(x, int | float) and x]
    if numbers:
        return round(sum(numbers) / len(numbers), 3)
    return float(from_response) if isinstance(from_response, int | float) else None


# ---------------------------------------------------------------- known-bad launch combinations


def known_bad(
    args: Mapping[str, Any],
    env: Mapping[str, str],
    version: str | None,
    expect: Mapping[str, Any] | None = None,
    concurrency: int | None = None,
) -> list[dict[str, Any]]:
    """Problems in a launch (flags as `[launch].args` spells them) for SGLang `version`, each
    {key, problem, hint, fatal}; `fatal` means SGLang would refuse to start."""
    given = {server_key(k): v for k, v in args.items() if v is not False and v is not None}
    problems = [
        _problem(k, f"--{k} is not an SGLang flag spelling", f"use --{k.replace('_', '-')}", True)
        for k in args
        if "_" in k
    ]
    v = version_tuple(version)
    if v is None:
        problems.append(
            _problem(
                "sglang_version",
                "the target SGLang version is unknown: version-specific checks skipped",
                "set launch.sglang_version (or install sglang where regen runs)",
                False,
            )
        )
    else:
        problems += _flag_names(given, v) + _mamba(given, env, v) + _speculative(given, env, v)
        if not any(p["fatal"] for p in problems):
            problems += _refusal(given, env, str(version))
    return problems + _expectations(given, expect or {}, v, concurrency)


def _refusal(given: Mapping[str, Any], env: Mapping[str, str], version: str) -> list[dict[str, Any]]:
    """A startup refusal the checks above do not name, found by resolving the args as SGLang `version` would."""
    try:
        resolve(dict(given), version, env)
    except SimStartupError as exc:
        return [_problem("sglang", f"SGLang {version} refuses to start ({exc.kind}: {exc.message})", "see above", True)]
    return []


def expected_capacity(args: Mapping[str, Any], env: Mapping[str, str], version: str | None) -> Capacity | None:
    """How many requests a server launched with `args` (flag spellings) will run at once, and what caps it;
    None when the version is unknown or SGLang would refuse the launch."""
    if version_tuple(version) is None:
        return None
    given = {server_key(k): v for k, v in args.items() if v is not False and v is not None}
    try:
        resolved = resolve(given, str(version), env)
    except SimStartupError:
        return None
    arch = str(resolved.get("architecture") or architecture_of(str(given.get("model_path") or "")))
    return capacity(resolved, str(version), hybrid=is_hybrid(arch), env=env)


def _problem(key: str, problem: str, hint: str, fatal: bool) -> dict[str, Any]:
    return {"key": key.lstrip("-"), "problem": problem, "hint": hint, "fatal": fatal}


def _strategy(given: Mapping[str, Any]) -> tuple[str | None, str]:
    """(flag used, strategy) with `auto` when neither mamba flag is given."""
    for key in MAMBA_KEYS:
        if key in given:
            return key, str(given[key])
    return None, "auto"


def _flag_names(given: Mapping[str, Any], v: tuple[int, int, int]) -> list[dict[str, Any]]:
    shown = ".".join(map(str, v))
    out = []
    if MAMBA_OLD in given and v >= (0, 5, 23):
        out.append(
            _problem(
                "mamba-scheduler-strategy",
                f"SGLang {shown} rejects --mamba-scheduler-strategy (unrecognized argument)",
                "use --mamba-radix-cache-strategy (same values)",
                True,
            )
        )
    elif MAMBA_OLD in given and v >= (0, 5, 14):
        out.append(
            _problem(
                "mamba-scheduler-strategy",
                f"--mamba-scheduler-strategy is a deprecated alias on {shown}",
                "use --mamba-radix-cache-strategy; 0.5.23 rejects the old name",
                False,
            )
        )
    if MAMBA_NEW in given and v < (0, 5, 14):
        out.append(
            _problem(
                "mamba-radix-cache-strategy",
                f"SGLang {shown} has no --mamba-radix-cache-strategy",
                "use --mamba-scheduler-strategy (≤0.5.12)",
                True,
            )
        )
    strategy = _strategy(given)[1]
    if strategy == "extra_buffer_lazy" and v < (0, 5, 14):
        out.append(
            _problem(
                "mamba-scheduler-strategy", f"extra_buffer_lazy does not exist on {shown}", "use extra_buffer", True
            )
        )
    return out


def _mamba(given: Mapping[str, Any], env: Mapping[str, str], v: tuple[int, int, int]) -> list[dict[str, Any]]:
    flag, strategy = _strategy(given)
    model = str(given.get("model_path") or "")
    if model and not looks_hybrid(model):
        return []
    name = "--" + (flag or (MAMBA_OLD if v < (0, 5, 14) else MAMBA_NEW)).replace("_", "-")
    spec = bool(given.get("speculative_algorithm"))
    radix_off = bool(given.get("disable_radix_cache"))
    out = []
    if strategy == "extra_buffer" and model and not _supports_extra_buffer(model):
        out.append(_problem(name, f"{model} does not support extra_buffer", "use no_buffer", True))
    if v < (0, 5, 14):
        out += _mamba_old(env, v, name, strategy, spec, radix_off)
    elif strategy == "no_buffer" and not radix_off and not given.get("disable_overlap_schedule"):
        out.append(
            _problem(
                name,
                "an explicit no_buffer needs --disable-overlap-schedule on SGLang ≥0.5.14 (AssertionError at start)",
                "add disable-overlap-schedule = true, or use auto / extra_buffer",
                True,
            )
        )
    elif strategy == "extra_buffer" and radix_off:
        out.append(
            _problem(
                name,
                "extra_buffer is inert with --disable-radix-cache on ≥0.5.14",
                "drop disable-radix-cache to use the extra buffer",
                False,
            )
        )
    return out


def _mamba_old(
    env: Mapping[str, str], v: tuple[int, int, int], name: str, strategy: str, spec: bool, radix_off: bool
) -> list[dict[str, Any]]:
    """SGLang ≤0.5.12, where auto means no_buffer: what the strategy does with the radix cache and speculative
    decoding."""
    out = []
    if strategy == "auto":
        out.append(
            _problem(
                name,
                "auto resolves to no_buffer on SGLang ≤0.5.12 (overlap schedule off)",
                f"pass {name} extra_buffer explicitly",
                False,
            )
        )
    out += _old_radix_cache(v, name, strategy, spec, radix_off)
    if strategy == "extra_buffer" and spec and v < (0, 5, 12) and not spec_v2_enabled(env, v):
        out.append(
            _problem(
                SPEC_V2_ENV,
                f"on {'.'.join(map(str, v))} extra_buffer with speculative decoding needs {SPEC_V2_ENV}=1 "
                "(without it SGLang runs spec v1 with the overlap schedule off)",
                f'add {SPEC_V2_ENV} = "1" to [launch].env',
                False,
            )
        )
    return out


def _old_radix_cache(
    v: tuple[int, int, int], name: str, strategy: str, spec: bool, radix_off: bool
) -> list[dict[str, Any]]:
    """The strategies SGLang 0.5.9-0.5.12 refuses, or quietly undoes, with the radix cache on or off."""
    out = []
    if strategy == "extra_buffer" and radix_off and v >= (0, 5, 10):
        out.append(
            _problem(
                name,
                "extra_buffer with --disable-radix-cache is refused on 0.5.10-0.5.12 (ValueError)",
                "use no_buffer with disable-radix-cache, or drop disable-radix-cache",
                True,
            )
        )
    if strategy not in ("auto", "no_buffer") or not spec or radix_off:
        return out
    if v >= (0, 5, 10):
        out.append(
            _problem(
                name,
                "no_buffer (auto) with speculative decoding and the radix cache is refused on 0.5.10-0.5.12 "
                "(ValueError at start)",
                f"pass {name} extra_buffer"
                + (f" and {SPEC_V2_ENV}=1" if v < (0, 5, 12) else "")
                + ", or disable-radix-cache = true",
                True,
            )
        )
    else:
        out.append(
            _problem(
                name,
                "SGLang 0.5.9 silently disables the radix cache for no_buffer + speculative decoding",
                f"pass {name} extra_buffer",
                False,
            )
        )
    return out


def _speculative(given: Mapping[str, Any], env: Mapping[str, str], v: tuple[int, int, int]) -> list[dict[str, Any]]:
    out = []
    if SPEC_V2_ENV in env and v >= (0, 5, 14):
        out.append(
            _problem(
                SPEC_V2_ENV,
                f"{SPEC_V2_ENV} has no effect on SGLang ≥0.5.14 (spec v2 always)",
                "remove it; use --disable-overlap-schedule for the synchronous path",
                False,
            )
        )
    if not given.get("speculative_algorithm"):
        return out
    topk, steps, draft = (
        given.get(k) for k in ("speculative_eagle_topk", "speculative_num_steps", "speculative_num_draft_tokens")
    )
    if topk == 1 and steps is not None and draft is not None and draft != steps + 1:
        out.append(
            _problem(
                "speculative-num-draft-tokens",
                f"SGLang changes it to {steps + 1} at topk 1",
                f"set speculative-num-draft-tokens = {steps + 1}",
                False,
            )
        )
    if isinstance(topk, int) and topk > 1 and v < (0, 5, 12) and spec_v2_enabled(env, v):
        out.append(
            _problem(
                "speculative-eagle-topk",
                f"with {SPEC_V2_ENV}=1, SGLang {'.'.join(map(str, v))} refuses speculative-eagle-topk {topk}: "
                "'Spec v2 currently only supports topk = 1 for speculative decoding.' (ValueError at start)",
                f"set speculative-eagle-topk = 1, or drop {SPEC_V2_ENV} (spec v1: the overlap scheduler off)",
                True,
            )
        )
    if str(given["speculative_algorithm"]).upper() == "NEXTN":
        out.append(
            _problem(
                "speculative-algorithm",
                "SGLang runs NEXTN as EAGLE and reports EAGLE",
                'write "EAGLE" in [expect]',
                False,
            )
        )
    return out


def _expectations(
    given: Mapping[str, Any], expect: Mapping[str, Any], v: tuple[int, int, int] | None, concurrency: int | None
) -> list[dict[str, Any]]:
    out = []
    spec = given.get("speculative_algorithm")
    for name, wanted in expect.items():
        key = server_key(name)
        flag = key.replace("_", "-")
        launched = given.get(key)
        if key in MAMBA_KEYS:
            launched = _strategy(given)[1]
            if launched == "auto" and wanted == "extra_buffer" and v is not None and v < (0, 5, 14):
                out.append(
                    _problem(
                        flag,
                        "[expect] wants extra_buffer but auto resolves to no_buffer on ≤0.5.12",
                        "pass the strategy flag with extra_buffer",
                        False,
                    )
                )
                continue
        if launched is not None and launched != "auto" and not same_value(key, wanted, launched):
            out.append(
                _problem(
                    flag,
                    f"[expect] says {name}={wanted!r} but [launch].args passes {launched!r}",
                    "make [expect] and [launch].args agree",
                    False,
                )
            )
    if spec and "max_running_requests" not in given and concurrency and concurrency > 48:
        out.append(
            _problem(
                "max-running-requests",
                f"with speculative decoding SGLang runs at most 48 requests, "
                f"the endpoint is configured for {concurrency}",
                f"set max-running-requests = {concurrency}, or lower endpoints.concurrency",
                False,
            )
        )
    return out
