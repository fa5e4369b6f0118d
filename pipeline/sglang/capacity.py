"""How many requests an SGLang server runs at once, per version: the one place regen computes it.

SGLang starts from `--max-running-requests` (48 when unset with speculative decoding, else a figure from GPU memory)
and, for hybrid (mamba / linear-attention) models, caps it at `max_mamba_cache_size // slots`, where `slots` is
the mamba state slots one request holds. That ratio changed in 0.5.10:

- radix cache off: 1 slot;
- radix cache on: 3 slots, plus the extra buffer's tracking slots when the strategy is extra_buffer:
  - 0.5.9: +1 with speculative decoding, +2 without (`model_executor/model_runner_kv_cache_mixin.py::init_memory_pool`);
  - 0.5.10 on: +2 with the overlap scheduler on, +1 with it off, whatever the speculative setting; from 0.5.14
    `extra_buffer_lazy` holds +1 (0.5.10-0.5.14 `model_runner_kv_cache_mixin.py::_calculate_mamba_ratio`; 0.5.19 on
    `mem_cache/kv_cache_configurator.py::_calculate_mamba_ratio` and `mem_cache/allocation_sizing.py::
    get_mamba_tracking_slots`);
  - 0.5.19 on, `SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1` drops the base to 2 (no_buffer adds the 1 back).

The simulator (its `internal_states` and `/v1/loads`), preflight (the warning that names the capping flag) and
`regen launch --dry-run` (the expected capacity of the command it writes) all read `capacity`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .releases import MAMBA_SKIP_DECODE_LOCK, MAMBA_SLOTS_BY_OVERLAP, Release

SPEC_DEFAULT_MAX_RUNNING = 48
_BASE_SLOTS = 3
_SKIP_DECODE_LOCK_ENV = "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"


def _on(env: Mapping[str, str], name: str) -> bool:
    return str(env.get(name, "")).strip().lower() in ("1", "true", "yes", "on")


def mamba_strategy(resolved: Mapping[str, Any]) -> str:
    """The resolved mamba strategy, whichever key the version reports it under."""
    return str(resolved.get("mamba_radix_cache_strategy") or resolved.get("mamba_scheduler_strategy") or "no_buffer")


def mamba_slots_per_request(resolved: Mapping[str, Any], version: str, env: Mapping[str, str] | None = None) -> int:
    """The mamba state slots one running request holds on SGLang `version` with these resolved args."""
    if resolved.get("disable_radix_cache"):
        return 1
    v = Release.of(version)
    strategy = mamba_strategy(resolved)
    extra = strategy in ("extra_buffer", "extra_buffer_lazy")
    skip = v >= MAMBA_SKIP_DECODE_LOCK and _on(env or {}, _SKIP_DECODE_LOCK_ENV)
    base = _BASE_SLOTS - (1 if skip else 0)
    if not extra:
        return base + (1 if skip else 0)
    if v < MAMBA_SLOTS_BY_OVERLAP:
        return base + (1 if resolved.get("speculative_algorithm") else 2)
    overlap = not resolved.get("disable_overlap_schedule")
    if strategy == "extra_buffer_lazy" and overlap:
        return base + 1
    return base + (2 if overlap else 1)


@dataclass(frozen=True)
class Capacity:
    """The effective max_running_requests of one DP rank, and what sets it."""

    requests: int | None  # None: set by GPU memory at start, not known before
    limit: str  # "mamba_cache" | "max_running_requests" | "spec_default" | "memory"
    flag: str | None  # the launch flag that caps it, e.g. "--max-mamba-cache-size"
    cause: str  # one sentence: the flag, its value, and the conditions that make the cap

    def hint(self, concurrency: int) -> str:
        """What to do when an endpoint sends `concurrency` requests to a server that runs `requests`."""
        if self.flag is None:
            return f"{self.cause}; lower endpoints.concurrency from {concurrency} to {self.requests}"
        return f"{self.cause}; raise {self.flag} or lower endpoints.concurrency from {concurrency} to {self.requests}"


def capacity(
    resolved: Mapping[str, Any],
    version: str,
    *,
    hybrid: bool,
    memory_max_running: int | None = None,
    memory_mamba_cache: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Capacity:
    """The effective concurrency of a server that resolved its args to `resolved` (server_args names).

    `memory_max_running` and `memory_mamba_cache` stand for what SGLang derives from GPU memory when
    `--max-running-requests` / `--max-mamba-cache-size` are unset (None: unknown before start)."""
    given = resolved.get("max_running_requests")
    spec = bool(resolved.get("speculative_algorithm"))
    if given is not None:
        base: int | None = int(given)
        spec_default = spec and base == SPEC_DEFAULT_MAX_RUNNING
        limit, flag = ("spec_default" if spec_default else "max_running_requests"), "--max-running-requests"
        cause = (
            f"--max-running-requests is {base} (SGLang's default with speculative decoding when unset)"
            if spec_default
            else f"--max-running-requests {base} caps this server at {base} running requests"
        )
    else:
        base, limit, flag = memory_max_running, "memory", None
        cause = "SGLang sizes max_running_requests from GPU memory at start"
    if not hybrid:
        return Capacity(base, limit, flag, cause)
    slots = mamba_slots_per_request(resolved, version, env)
    cache = resolved.get("max_mamba_cache_size")
    cache_flag = cache is not None
    cache = cache if cache is not None else memory_mamba_cache
    if cache is None:
        return Capacity(base, limit, flag, cause)
    mamba_cap = max(0, int(cache) // slots)
    if base is not None and base <= mamba_cap:
        return Capacity(base, limit, flag, cause)
    why = _conditions(resolved, version, slots)
    if cache_flag:
        text = f"--max-mamba-cache-size {cache} caps this server at {mamba_cap} running requests ({why})"
        return Capacity(mamba_cap, "mamba_cache", "--max-mamba-cache-size", text)
    text = (
        f"the mamba state cache ({cache} slots, sized from GPU memory by --mamba-full-memory-ratio) caps this server "
        f"at {mamba_cap} running requests ({why})"
    )
    return Capacity(mamba_cap, "mamba_cache", "--mamba-full-memory-ratio", text)


def _conditions(resolved: Mapping[str, Any], version: str, slots: int) -> str:
    """Why a request holds `slots` mamba slots, in words: "5 slots per request: extra_buffer, ... on"."""
    if resolved.get("disable_radix_cache"):
        return "1 slot per request: radix cache off"
    parts = [mamba_strategy(resolved)]
    if resolved.get("speculative_algorithm"):
        parts.append("speculative decoding")
    if Release.of(version) >= MAMBA_SLOTS_BY_OVERLAP:
        parts.append("the overlap scheduler " + ("off" if resolved.get("disable_overlap_schedule") else "on"))
    return f"{slots} slots per request with " + (
        ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    )
