"""Launch flags → resolved server_args, per SGLang release (shared/SGLANG.md section 5).

`resolve(args, version)` is the one place where regen reproduces SGLang's own silent adjustments of its arguments
and its startup refusals. It takes the args as launched (a mapping of server_args names; `None` means "flag not
given") and returns the flat dict that `/server_info` reports. A refusal raises `StartupRefused` with SGLang's
message; `kind` says how real SGLang reports it (argparse usage error, ValueError, AssertionError). The simulator
serves what it returns.

`resolution(args, version)` runs the same rules without stopping at the first refusal, the way a checker reads a
launch: every refusal the launch meets and every silent change SGLang makes, each named by its `Rule`. `regen
launch --dry-run` and preflight's launch checks (server/launch_rules.py) word their advice from it, so the rules
live here once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .capacity import SPEC_DEFAULT_MAX_RUNNING, capacity
from .models import EXTRA_BUFFER_ARCHS, architecture_of, auto_spec_params, draft_is_model, is_hybrid
from .releases import (
    AUTO_PICKS_EXTRA_BUFFER,
    EXTRA_BUFFER_LAZY,
    EXTRA_BUFFER_LAZY_WITH_SPEC,
    EXTRA_BUFFER_REFUSES_RADIX_OFF,
    MAMBA_FLAG_RENAMED,
    MAMBA_HOOK,
    NEWEST,
    NO_BUFFER_FORCES_PAGE_SIZE_1,
    NO_BUFFER_SPEC_REFUSED,
    OLD_MAMBA_FLAG_REJECTED,
    SPEC_ALGORITHM_FREE_TEXT,
    SPEC_ALGORITHMS_DSPARK_UNO,
    SPEC_V2_DEFAULT_ON,
    SPEC_V2_ENV_IGNORED,
    SPEC_V2_ENV_REMOVED,
    USES_MAMBA_RADIX_CACHE_KEY,
    Release,
)

_EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "NEXTN"})
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")  # argparse choices before 0.5.12
# From 0.5.12 the flag is free text, upper-cased and looked up at start (`speculative/spec_info.py::from_string`).
_SPEC_BUILTINS = {
    SPEC_ALGORITHM_FREE_TEXT: frozenset({"DFLASH", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN"}),
    SPEC_ALGORITHMS_DSPARK_UNO: frozenset(
        {"DFLASH", "DSPARK", "UNO", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN"}
    ),
}
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
MAMBA_STRATEGIES = ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")


class Rule(StrEnum):
    """Each startup refusal and silent change `resolve` reproduces, by name: what a checker words its advice on."""

    # refusals
    OLD_MAMBA_FLAG = "old_mamba_flag"  # --mamba-scheduler-strategy is no flag of this release (argparse)
    NEW_MAMBA_FLAG = "new_mamba_flag"  # --mamba-radix-cache-strategy is no flag of this release (argparse)
    NO_EXTRA_BUFFER_LAZY = "no_extra_buffer_lazy"  # extra_buffer_lazy is no choice of this release (argparse)
    SPEC_ALGORITHM = "spec_algorithm"  # no speculative algorithm of that name
    EXTRA_BUFFER_ARCH = "extra_buffer_arch"  # the architecture has no extra buffer
    EXTRA_BUFFER_BACKEND = "extra_buffer_backend"  # the linear attention backend has no extra buffer
    EXTRA_BUFFER_LAZY_SPEC = "extra_buffer_lazy_spec"  # extra_buffer_lazy with speculative decoding
    TRACK_INTERVAL = "track_interval"  # mamba_track_interval below the draft tokens or not a multiple of page_size
    EXTRA_BUFFER_RADIX_OFF = "extra_buffer_radix_off"  # extra_buffer with --disable-radix-cache
    NO_BUFFER_SPEC_RADIX = "no_buffer_spec_radix"  # no_buffer, speculative decoding and the radix cache
    NO_BUFFER_OVERLAP = "no_buffer_overlap"  # an explicit no_buffer with the overlap schedule on
    NO_BUFFER_PAGE_SIZE = "no_buffer_page_size"  # an explicit no_buffer with page_size > 1
    NO_BUFFER_TRTLLM = "no_buffer_trtllm"  # an explicit no_buffer with the trtllm_mha attention backend
    SPEC_V2_TOPK = "spec_v2_topk"  # spec v2 with speculative_eagle_topk > 1
    # silent changes
    MAMBA_FLAG_ALIAS = "mamba_flag_alias"  # --mamba-scheduler-strategy read as --mamba-radix-cache-strategy
    AUTO_NO_BUFFER = "auto_no_buffer"  # auto is no_buffer, whatever the architecture
    RADIX_OFF_FOR_SPEC = "radix_off_for_spec"  # no_buffer + speculative decoding: the radix cache turned off
    EXTRA_BUFFER_INERT = "extra_buffer_inert"  # extra_buffer kept with the radix cache off, where nothing uses it
    SPEC_V2_OFF = "spec_v2_off"  # SGLANG_ENABLE_SPEC_V2 off: spec v1, the overlap schedule turned off
    SPEC_V1_TOPK = "spec_v1_topk"  # speculative_eagle_topk > 1: spec v1, the overlap schedule turned off
    SPEC_V2_ENV_IGNORED = "spec_v2_env_ignored"  # SGLANG_ENABLE_SPEC_V2 has no effect
    DRAFT_TOKENS_ADJUSTED = "draft_tokens_adjusted"  # draft tokens set to steps + 1 at topk 1
    NEXTN_AS_EAGLE = "nextn_as_eagle"  # NEXTN runs, and is reported, as EAGLE


class StartupRefused(Exception):
    """SGLang refuses to start. `kind` is "argparse" (exit 2, usage error) or the Python exception SGLang raises;
    `rule` names the rule that refuses (None for a refusal from outside these rules, e.g. the simulator's)."""

    def __init__(self, message: str, kind: str = "ValueError", rule: Rule | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.rule = rule

    @property
    def exit_code(self) -> int:
        return 2 if self.kind == "argparse" else 1


@dataclass
class Resolution:
    """What SGLang makes of a launch: the server_args it runs with (`args`, as `resolve` returns them), the
    refusals met on the way (SGLang stops at the first; `strict` raises it there) and the silent changes, in order.
    After a refusal the rules go on as if it had passed, so a checker sees every one."""

    args: dict[str, Any]
    strict: bool = True
    refusals: list[StartupRefused] = field(default_factory=list)
    changes: list[Rule] = field(default_factory=list)

    def refuse(self, rule: Rule, message: str, kind: str = "ValueError") -> None:
        refused = StartupRefused(message, kind, rule)
        if self.strict:
            raise refused
        self.refusals.append(refused)

    def change(self, rule: Rule) -> None:
        self.changes.append(rule)

    def refused(self, rule: Rule) -> StartupRefused | None:
        return next((r for r in self.refusals if r.rule == rule), None)


def check_flags(given: Mapping[str, Any], version: str) -> None:
    """Reject flags that do not exist in `version`, the way argparse does (before anything starts)."""
    _check_flags(Resolution({}), given, Release.of(version))


def _check_flags(r: Resolution, given: Mapping[str, Any], v: Release) -> None:
    old, new = given.get("mamba_scheduler_strategy"), given.get("mamba_radix_cache_strategy")
    if v >= OLD_MAMBA_FLAG_REJECTED and old is not None:
        r.refuse(Rule.OLD_MAMBA_FLAG, f"unrecognized arguments: --mamba-scheduler-strategy {old}", "argparse")
    elif v >= MAMBA_FLAG_RENAMED and old is not None:
        r.change(Rule.MAMBA_FLAG_ALIAS)
    if v < MAMBA_FLAG_RENAMED and new is not None:
        r.refuse(Rule.NEW_MAMBA_FLAG, f"unrecognized arguments: --mamba-radix-cache-strategy {new}", "argparse")
    for flag, value in (("--mamba-scheduler-strategy", old), ("--mamba-radix-cache-strategy", new)):
        if value == "extra_buffer_lazy" and v < EXTRA_BUFFER_LAZY:
            choices = ", ".join(repr(c) for c in MAMBA_STRATEGIES[:3])
            message = f"argument {flag}: invalid choice: {value!r} (choose from {choices})"
            r.refuse(Rule.NO_EXTRA_BUFFER_LAZY, message, "argparse")


def check_spec_algorithm(name: str | None, version: str) -> None:
    """`--speculative-algorithm`: an argparse choice before 0.5.12; from 0.5.12 any text, refused at start when no
    algorithm of that name exists."""
    _check_spec_algorithm(Resolution({}), name, Release.of(version))


def _check_spec_algorithm(r: Resolution, name: str | None, v: Release) -> None:
    if name is None:
        return
    if v < SPEC_ALGORITHM_FREE_TEXT:
        if name not in SPEC_ALGORITHMS:
            choices = ", ".join(repr(c) for c in SPEC_ALGORITHMS)
            message = f"argument --speculative-algorithm: invalid choice: {name!r} (choose from {choices})"
            r.refuse(Rule.SPEC_ALGORITHM, message, "argparse")
        return
    builtins = _SPEC_BUILTINS[
        SPEC_ALGORITHMS_DSPARK_UNO if v >= SPEC_ALGORITHMS_DSPARK_UNO else SPEC_ALGORITHM_FREE_TEXT
    ]
    if name.upper() not in builtins:
        r.refuse(Rule.SPEC_ALGORITHM, f"Unknown speculative algorithm name: {name}")


def spec_v2_enabled(env: Mapping[str, str], version: Release) -> bool:
    """SGLANG_ENABLE_SPEC_V2 as SGLang ≤0.5.12 reads it (default off before 0.5.12, on in 0.5.12)."""
    raw = env.get(SPEC_V2_ENV)
    if raw is None:
        return version >= SPEC_V2_DEFAULT_ON
    return raw.strip().lower() in ("1", "true", "yes", "on")


def resolve(
    args: Mapping[str, Any], version: str = str(NEWEST), env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The server_args SGLang `version` would run with, given the launch `args`; raises StartupRefused."""
    return resolution(args, version, env, strict=True).args


def resolution(
    args: Mapping[str, Any], version: str = str(NEWEST), env: Mapping[str, str] | None = None, *, strict: bool = False
) -> Resolution:
    """What SGLang `version` makes of the launch `args`: its server_args, refusals and silent changes (`Resolution`).
    `strict` raises the first refusal, as SGLang does."""
    env = os.environ if env is None else env
    v = Release.of(version)
    r = Resolution(dict(args), strict)
    _check_flags(r, args, v)
    _check_spec_algorithm(r, args.get("speculative_algorithm"), v)
    out = r.args
    old = out.pop("mamba_scheduler_strategy", None)
    new = out.pop("mamba_radix_cache_strategy", None)
    strategy = (new if new is not None else old) or "auto"
    arch = out.get("architecture") or architecture_of(str(out.get("model_path") or ""))
    out["architecture"] = arch
    if out.get("served_model_name") is None:
        out["served_model_name"] = out.get("model_path")
    for key, default in (("disable_radix_cache", False), ("disable_overlap_schedule", False)):
        out[key] = bool(out.get(key) or default)
    out.setdefault("page_size", 1)
    out.setdefault("mamba_track_interval", 256)
    out.setdefault("speculative_eagle_topk", None)
    spec = out.get("speculative_algorithm")
    if is_hybrid(arch):
        if v >= MAMBA_HOOK:
            strategy = _mamba_v14(r, arch, strategy, v, bool(spec))
        else:
            strategy = _mamba_v9(r, arch, strategy, v, bool(spec))
    if spec:
        _speculative(r, arch, v, env)
    if v >= MAMBA_FLAG_RENAMED:
        out["mamba_radix_cache_strategy"] = strategy
        if v >= USES_MAMBA_RADIX_CACHE_KEY:  # a ServerArgs field from 0.5.19 (0.5.14 computes it but does not store it)
            out["uses_mamba_radix_cache"] = is_hybrid(arch) and not out["disable_radix_cache"]
    else:
        out["mamba_scheduler_strategy"] = strategy
    if env.get(SPEC_V2_ENV) is not None and v >= SPEC_V2_ENV_REMOVED:
        r.change(Rule.SPEC_V2_ENV_IGNORED)
        if v < SPEC_V2_ENV_IGNORED:
            out.setdefault("_warnings", []).append(
                "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker. "
                "Use --disable-overlap-schedule to select the non-overlap (synchronous) path."
            )
    return r


def _mamba_v9(r: Resolution, arch: str, strategy: str, v: Release, spec: bool) -> str:
    """0.5.9–0.5.12 `server_args.py::_handle_mamba_radix_cache` (auto is always no_buffer)."""
    out = r.args
    if strategy == "auto" and v < AUTO_PICKS_EXTRA_BUFFER:
        strategy = "no_buffer"
        r.change(Rule.AUTO_NO_BUFFER)
    if strategy == "extra_buffer":
        if arch not in EXTRA_BUFFER_ARCHS:
            r.refuse(Rule.EXTRA_BUFFER_ARCH, f"mamba extra_buffer is not supported for {arch} model", "AssertionError")
        draft = out.get("speculative_num_draft_tokens")
        interval = out["mamba_track_interval"]
        if draft is not None and interval < draft:
            message = (
                f"mamba_track_interval {interval} must be greater than or equal to speculative_num_draft_tokens {draft}"
            )
            r.refuse(Rule.TRACK_INTERVAL, message)
        if interval % out["page_size"]:
            r.refuse(
                Rule.TRACK_INTERVAL,
                f"mamba_track_interval {interval} must be divisible by page_size {out['page_size']}",
            )
        if v >= EXTRA_BUFFER_REFUSES_RADIX_OFF and out["disable_radix_cache"]:
            r.refuse(
                Rule.EXTRA_BUFFER_RADIX_OFF,
                "mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is already "
                "supported with no_buffer + disable_radix_cache. Please use --mamba-scheduler-strategy no_buffer "
                "instead.",
            )
        return strategy
    if strategy == "extra_buffer_lazy":
        return strategy  # no strategy of these releases: refused by the flag check already
    # no_buffer
    if v >= NO_BUFFER_FORCES_PAGE_SIZE_1 and out["page_size"] != 1 and not out["disable_radix_cache"]:
        out["page_size"] = 1
    if out["disable_radix_cache"]:
        return strategy
    if spec:
        if v >= NO_BUFFER_SPEC_REFUSED:
            r.refuse(
                Rule.NO_BUFFER_SPEC_RADIX,
                f"Speculative decoding for {arch} is not compatible with radix cache when using "
                "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
                "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.",
            )
            return strategy
        out["disable_radix_cache"] = True
        r.change(Rule.RADIX_OFF_FOR_SPEC)
    elif out.get("attention_backend") == "trtllm_mha":
        out["disable_radix_cache"] = True
    else:
        out["disable_overlap_schedule"] = True
    return strategy


def _mamba_v14(r: Resolution, arch: str, strategy: str, v: Release, spec: bool) -> str:
    """≥0.5.14 `handle_mamba_radix_cache` + mamba hook (auto picks extra_buffer where it can)."""
    out = r.args
    if out["disable_radix_cache"]:
        if strategy in ("extra_buffer", "extra_buffer_lazy"):
            r.change(Rule.EXTRA_BUFFER_INERT)
        return strategy  # resolution skipped; an explicit extra_buffer stays in the field, inert
    arch_supported = arch in EXTRA_BUFFER_ARCHS
    supported = arch_supported and out.get("linear_attn_backend", "triton") == "triton"
    if strategy == "auto":
        if supported and (not out["disable_overlap_schedule"] or out["page_size"] > 1):
            strategy = "extra_buffer"
        else:
            strategy = "no_buffer"
            out["disable_overlap_schedule"] = True
        return strategy
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        if not supported:
            rule = Rule.EXTRA_BUFFER_BACKEND if arch_supported else Rule.EXTRA_BUFFER_ARCH
            r.refuse(rule, f"extra_buffer is not supported for {arch}; use no_buffer.", "AssertionError")
        if strategy == "extra_buffer_lazy" and spec and v < EXTRA_BUFFER_LAZY_WITH_SPEC:
            r.refuse(Rule.EXTRA_BUFFER_LAZY_SPEC, "extra_buffer_lazy unsupported with spec.", "AssertionError")
        draft = out.get("speculative_num_draft_tokens")
        interval = out["mamba_track_interval"]
        if (draft is not None and interval < draft) or interval % out["page_size"]:
            r.refuse(Rule.TRACK_INTERVAL, "", "AssertionError")
        return strategy
    if not out["disable_overlap_schedule"]:
        message = "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
        r.refuse(Rule.NO_BUFFER_OVERLAP, message, "AssertionError")
    if out["page_size"] != 1:
        r.refuse(Rule.NO_BUFFER_PAGE_SIZE, "no_buffer only supports page_size=1.", "AssertionError")
    if out.get("attention_backend") == "trtllm_mha":
        r.refuse(Rule.NO_BUFFER_TRTLLM, "no_buffer do not support trtllm_mha attention backend.", "AssertionError")
    return strategy


def _speculative(r: Resolution, arch: str, v: Release, env: Mapping[str, str]) -> None:
    """Speculative decoding: NEXTN→EAGLE, auto (steps, topk, draft), draft=steps+1 at topk 1, 48 requests."""
    out = r.args
    algo = str(out["speculative_algorithm"]).upper()
    if algo == "NEXTN":
        algo = "EAGLE"
        r.change(Rule.NEXTN_AS_EAGLE)
    out["speculative_algorithm"] = algo
    if algo == "NGRAM":
        out["disable_overlap_schedule"] = True
    elif algo in _EAGLE_FAMILY:
        auto = auto_spec_params(arch)
        for key, value in zip(
            ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"), auto, strict=True
        ):
            if out.get(key) is None:
                out[key] = value
        if (
            out["speculative_eagle_topk"] == 1
            and out["speculative_num_draft_tokens"] != out["speculative_num_steps"] + 1
        ):
            out["speculative_num_draft_tokens"] = out["speculative_num_steps"] + 1
            r.change(Rule.DRAFT_TOKENS_ADJUSTED)
            out.setdefault("_warnings", []).append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
        _spec_overlap(r, v, env)
    if out.get("max_running_requests") is None:
        out["max_running_requests"] = SPEC_DEFAULT_MAX_RUNNING
    out["enable_mixed_chunk"] = False
    if out.get("speculative_draft_model_path") is None and draft_is_model(arch):
        out["speculative_draft_model_path"] = out.get("model_path")


def _spec_overlap(r: Resolution, v: Release, env: Mapping[str, str]) -> None:
    if v >= SPEC_V2_ENV_REMOVED:
        return
    out = r.args
    spec_v2 = spec_v2_enabled(env, v)
    topk = out["speculative_eagle_topk"]
    if not spec_v2:
        out["disable_overlap_schedule"] = True
        r.change(Rule.SPEC_V2_OFF)
    if v >= SPEC_V2_DEFAULT_ON:
        if topk > 1:
            out["disable_overlap_schedule"] = True
            r.change(Rule.SPEC_V1_TOPK)
        return
    if spec_v2 and topk > 1:
        r.refuse(Rule.SPEC_V2_TOPK, "Spec v2 currently only supports topk = 1 for speculative decoding.")


def effective_max_running(
    resolved: Mapping[str, Any], version: str, env: Mapping[str, str], *, memory_max_running: int, memory_mamba: int
) -> int:
    """`internal_states[].effective_max_running_requests_per_dp`: the real concurrency cap (`capacity.capacity`)."""
    arch = str(resolved.get("architecture") or architecture_of(str(resolved.get("model_path") or "")))
    cap = capacity(
        resolved,
        version,
        hybrid=is_hybrid(arch),
        memory_max_running=memory_max_running,
        memory_mamba_cache=memory_mamba,
        env=env,
    )
    return max(1, cap.requests or memory_max_running)
