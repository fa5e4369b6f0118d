"""Hints for drift: why SGLang reports a server argument other than the one asked for, and what to change.

Pure functions of the key, the two values, the server's /server_info and its version (shared/SGLANG.md sections
4-6); checks.py attaches the hint to a failed `[expect]` or `[launch].args` check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sglang.capacity import SPEC_DEFAULT_MAX_RUNNING
from ..sglang.releases import (
    AUTO_PICKS_EXTRA_BUFFER,
    EXTRA_BUFFER_INERT_WITHOUT_RADIX,
    EXTRA_BUFFER_REFUSES_RADIX_OFF,
    MAMBA_HOOK,
    NO_BUFFER_SPEC_REFUSED,
    PD_DECODE_DROPS_EXTRA_BUFFER,
    SPEC_V2_DEFAULT_ON,
    SPEC_V2_ENV_REMOVED,
    Release,
    span,
)
from ..sglang.resolution import SPEC_V2_ENV
from .server_args import MAMBA_KEYS


def drift_hint(key: str, expected: Any, actual: Any, info: Mapping[str, Any], version: str | None) -> str:
    """Why SGLang may report `actual` where `expected` was asked for, and what to change."""
    v = Release.parse(version)
    spec = info.get("speculative_algorithm")
    if key in MAMBA_KEYS:
        return _mamba_hint(key, expected, actual, info, v)
    if key == "speculative_algorithm":
        if actual is None:
            return "speculative decoding is off: launch with --speculative-algorithm (EAGLE for MTP heads)"
        return f"SGLang reports {actual}; NEXTN is always reported as EAGLE"
    if key == "disable_radix_cache" and actual:
        return (
            "SGLang disables the radix cache for hybrid models with no_buffer + speculative decoding "
            f"({span(until=NO_BUFFER_SPEC_REFUSED)}), trtllm_mha + no_buffer, and PD decode servers; use extra_buffer "
            "to keep it"
        )
    if key == "disable_overlap_schedule" and actual:
        why = "mamba no_buffer, NGRAM speculative decoding"
        if v is None or v < SPEC_V2_ENV_REMOVED:
            why += f", spec v1 (speculative_eagle_topk > 1 or {SPEC_V2_ENV} off, {span(until=SPEC_V2_ENV_REMOVED)})"
        return f"SGLang turns the overlap schedule off for {why}"
    if key == "max_running_requests" and spec and actual == SPEC_DEFAULT_MAX_RUNNING:
        return (
            f"SGLang caps max_running_requests at {SPEC_DEFAULT_MAX_RUNNING} with speculative decoding unless "
            "--max-running-requests is set"
        )
    if key == "speculative_num_draft_tokens" and info.get("speculative_eagle_topk") == 1:
        return "at speculative_eagle_topk 1 SGLang forces speculative_num_draft_tokens = speculative_num_steps + 1"
    if key == "reasoning_parser" and not actual:
        return "without --reasoning-parser the reasoning lands in content with its </think>; launch with it"
    if key == "page_size":
        return "SGLang sets page_size by attention backend (64 trtllm/flashmla, 128 cutlass_mla/fa4, 1 mamba no_buffer)"
    if key == "served_model_name":
        return "--served-model-name defaults to the model path; set it to generation.model"
    if key == "chunked_prefill_size":
        return "SGLang sizes chunked_prefill_size by GPU memory when unset and divides it by dp_size with DP attention"
    return "SGLang resolved this server arg differently; compare /server_info with the launch flags"


def _mamba_hint(key: str, expected: Any, actual: Any, info: Mapping[str, Any], v: Release | None) -> str:
    flag = "--" + key.replace("_", "-")
    if info.get("disable_radix_cache") and actual == expected:
        inert = span(EXTRA_BUFFER_INERT_WITHOUT_RADIX)
        return f"{expected} is inert with --disable-radix-cache ({inert}): no mamba state is cached"
    if expected == "extra_buffer" and actual == "no_buffer":
        if v is not None and v < AUTO_PICKS_EXTRA_BUFFER:
            extra = f" and set {SPEC_V2_ENV}=1" if v < SPEC_V2_DEFAULT_ON and info.get("speculative_algorithm") else ""
            if info.get("disable_radix_cache") and v >= EXTRA_BUFFER_REFUSES_RADIX_OFF:
                refused = span(EXTRA_BUFFER_REFUSES_RADIX_OFF, EXTRA_BUFFER_INERT_WITHOUT_RADIX)
                extra += f" and drop --disable-radix-cache ({refused} refuse extra_buffer with it)"
            pd_decode = span(PD_DECODE_DROPS_EXTRA_BUFFER, MAMBA_HOOK)
            return (
                f"SGLang {v} resolves auto (the default) to no_buffer: pass "
                f"{flag} extra_buffer explicitly{extra}; a PD decode server ({pd_decode}) also falls back to no_buffer"
            )
        return (
            f"auto picks no_buffer when the overlap schedule is off with page_size 1, or the architecture / "
            f"linear_attn_backend has no extra buffer: pass {flag} extra_buffer explicitly"
        )
    return f"SGLang resolved {flag} to {actual}; pass the strategy explicitly"
