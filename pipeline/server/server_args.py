"""What regen knows about SGLang's server arguments across versions (shared/SGLANG.md sections 4-6).

Pure data and pure functions, of two kinds:
- key names and values: a launch flag or an `[expect]` key → the `/server_info` key that reports it, version-aware
  (the mamba strategy is `mamba_scheduler_strategy` before the release `MAMBA_FLAG_RENAMED` names and
  `mamba_radix_cache_strategy` from it),
  and when a reported value satisfies an expectation (`same_value`);
- what a `/server_info` says beyond its keys: the configuration fingerprint, the effective concurrency, the
  speculative accept length;
Known-bad launch combinations for a target version are launch_rules.py; why SGLang reports a value other than the
one asked for is drift_hints.py. The release facts they all rest on (versions, hybrid models, the capacity rule,
the resolution of flags) are `pipeline.sglang`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sglang.capacity import Capacity, capacity
from ..sglang.models import looks_hybrid
from ..sglang.releases import MAMBA_FLAG_RENAMED, NEWEST, Release

MAMBA_OLD = "mamba_scheduler_strategy"
MAMBA_NEW = "mamba_radix_cache_strategy"
MAMBA_KEYS = (MAMBA_OLD, MAMBA_NEW)

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


def mamba_key(version: str | None) -> str | None:
    """The /server_info key of the mamba strategy for `version` (None when the version is unknown)."""
    v = Release.parse(version)
    if v is None:
        return None
    return MAMBA_OLD if v < MAMBA_FLAG_RENAMED else MAMBA_NEW


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
    version = str(info.get("version") or NEWEST)
    return capacity(info, version, hybrid=looks_hybrid(str(info.get("model_path") or "")))


def spec_accept_length(info: Mapping[str, Any], from_response: Any = None) -> float | None:
    """The mean accept length: /server_info internal_states[].avg_spec_accept_length, else a response's."""
    values = [s.get("avg_spec_accept_length") for s in info.get("internal_states") or [] if isinstance(s, dict)]
    numbers = [float(x) for x in values if isinstance(x, int | float) and x]
    if numbers:
        return round(sum(numbers) / len(numbers), 3)
    return float(from_response) if isinstance(from_response, int | float) else None
