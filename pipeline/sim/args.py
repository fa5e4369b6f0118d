"""Launch flags → resolved server_args, per simulated SGLang version (shared/SGLANG.md section 5).

`resolve(args, version)` is the one place where the simulator reproduces SGLang's own silent adjustments of its
arguments and its startup rejections. It takes the args as launched (a mapping of server_args names; `None` means
"flag not given") and returns the flat dict that `/server_info` reports. A rejection raises `SimStartupError` with
SGLang's message; `kind` says how real SGLang reports it (argparse usage error, ValueError, AssertionError).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .capacity import capacity

VERSIONS = ("0.5.9", "0.5.10", "0.5.12", "0.5.14", "0.5.15", "0.5.19", "0.5.23")
_REPORTED = {"0.5.10": "0.5.10.post1"}

# Architectures whose KV cache is hybrid (mamba / linear attention), and those of them that support extra_buffer.
_EXTRA_BUFFER_ARCHS = frozenset(
    {
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "Qwen3NextForCausalLM",
    }
)
_HYBRID_ARCHS = _EXTRA_BUFFER_ARCHS | {"NemotronHForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM"}
_EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "NEXTN"})
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")  # argparse choices before 0.5.12
# From 0.5.12 the flag is free text, upper-cased and looked up at start (`speculative/spec_info.py::from_string`).
_SPEC_BUILTINS = {
    (0, 5, 12): frozenset({"DFLASH", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN"}),
    (0, 5, 23): frozenset(
        {"DFLASH", "DSPARK", "UNO", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN"}
    ),
}
MAMBA_STRATEGIES = ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")


class SimStartupError(Exception):
    """SGLang refuses to start. `kind` is "argparse" (exit 2, usage error) or the Python exception SGLang raises."""

    def __init__(self, message: str, kind: str = "ValueError") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind

    @property
    def exit_code(self) -> int:
        return 2 if self.kind == "argparse" else 1


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.5.10.post1' → (0, 5, 10)."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def reported_version(version: str) -> str:
    return _REPORTED.get(version, version)


def architecture_of(model_path: str) -> str:
    """The HF architecture the simulator pretends `model_path` has (by name: Qwen3.5/3.6/Next are hybrid)."""
    name = model_path.lower()
    if "qwen3.5" in name or "qwen3.6" in name or "qwen3_5" in name:
        return "Qwen3_5MoeForConditionalGeneration" if "-a" in name else "Qwen3_5ForConditionalGeneration"
    if "qwen3-next" in name:
        return "Qwen3NextForCausalLM"
    if "nemotron-h" in name or "nemotronh" in name or "nemotron-3" in name:
        return "NemotronHForCausalLM"
    if "llama" in name:
        return "LlamaForCausalLM"
    if "grok" in name:
        return "Grok1ForCausalLM"
    return "Qwen3ForCausalLM"


def is_hybrid(arch: str) -> bool:
    return arch in _HYBRID_ARCHS


def default_context_length(arch: str) -> int:
    return 262144 if arch in _EXTRA_BUFFER_ARCHS else 40960


def check_flags(given: Mapping[str, Any], version: str) -> None:
    """Reject flags that do not exist in `version`, the way argparse does (before anything starts)."""
    v = version_tuple(version)
    old, new = given.get("mamba_scheduler_strategy"), given.get("mamba_radix_cache_strategy")
    if v >= (0, 5, 23) and old is not None:
        raise SimStartupError(f"unrecognized arguments: --mamba-scheduler-strategy {old}", "argparse")
    if v < (0, 5, 14) and new is not None:
        raise SimStartupError(f"unrecognized arguments: --mamba-radix-cache-strategy {new}", "argparse")
    for flag, value in (("--mamba-scheduler-strategy", old), ("--mamba-radix-cache-strategy", new)):
        if value == "extra_buffer_lazy" and v < (0, 5, 14):
            choices = ", ".join(repr(c) for c in MAMBA_STRATEGIES[:3])
            raise SimStartupError(f"argument {flag}: invalid choice: {value!r} (choose from {choices})", "argparse")


def check_spec_algorithm(name: str | None, version: str) -> None:
    """`--speculative-algorithm`: an argparse choice before 0.5.12; from 0.5.12 any text, refused at start when no
    algorithm of that name exists."""
    if name is None:
        return
    v = version_tuple(version)
    if v < (0, 5, 12):
        if name not in SPEC_ALGORITHMS:
            choices = ", ".join(repr(c) for c in SPEC_ALGORITHMS)
            raise SimStartupError(
                f"argument --speculative-algorithm: invalid choice: {name!r} (choose from {choices})", "argparse"
            )
        return
    builtins = _SPEC_BUILTINS[(0, 5, 23) if v >= (0, 5, 23) else (0, 5, 12)]
    if name.upper() not in builtins:
        raise SimStartupError(f"Unknown speculative algorithm name: {name}")


def _env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def resolve(args: Mapping[str, Any], version: str = "0.5.23", env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The server_args SGLang `version` would run with, given the launch `args`; raises SimStartupError."""
    env = os.environ if env is None else env
    check_flags(args, version)
    check_spec_algorithm(args.get("speculative_algorithm"), version)
    v = version_tuple(version)
    out: dict[str, Any] = dict(args)
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
        if v >= (0, 5, 14):
            strategy = _mamba_v14(out, arch, strategy, v, bool(spec))
        else:
            strategy = _mamba_v9(out, arch, strategy, v, bool(spec))
    if spec:
        _speculative(out, arch, v, env)
    if v >= (0, 5, 14):
        out["mamba_radix_cache_strategy"] = strategy
        if v >= (0, 5, 19):  # a ServerArgs field from 0.5.19 (0.5.14 computes it but does not store it)
            out["uses_mamba_radix_cache"] = is_hybrid(arch) and not out["disable_radix_cache"]
        if env.get("SGLANG_ENABLE_SPEC_V2") is not None and v < (0, 5, 23):
            out.setdefault("_warnings", []).append(
                "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker. "
                "Use --disable-overlap-schedule to select the non-overlap (synchronous) path."
            )
    else:
        out["mamba_scheduler_strategy"] = strategy
    return out


def _mamba_v9(out: dict[str, Any], arch: str, strategy: str, v: tuple[int, ...], spec: bool) -> str:
    """0.5.9–0.5.12 `server_args.py::_handle_mamba_radix_cache` (auto is always no_buffer)."""
    if strategy == "auto":
        strategy = "no_buffer"
    if strategy == "extra_buffer":
        if arch not in _EXTRA_BUFFER_ARCHS:
            raise SimStartupError(f"mamba extra_buffer is not supported for {arch} model", "AssertionError")
        draft = out.get("speculative_num_draft_tokens")
        interval = out["mamba_track_interval"]
        if draft is not None and interval < draft:
            raise SimStartupError(
                f"mamba_track_interval {interval} must be greater than or equal to speculative_num_draft_tokens {draft}"
            )
        if interval % out["page_size"]:
            raise SimStartupError(f"mamba_track_interval {interval} must be divisible by page_size {out['page_size']}")
        if v >= (0, 5, 10) and out["disable_radix_cache"]:
            raise SimStartupError(
                "mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is already "
                "supported with no_buffer + disable_radix_cache. Please use --mamba-scheduler-strategy no_buffer "
                "instead."
            )
        return strategy
    # no_buffer
    if v >= (0, 5, 12) and out["page_size"] != 1 and not out["disable_radix_cache"]:
        out["page_size"] = 1
    if out["disable_radix_cache"]:
        return strategy
    if spec:
        if v >= (0, 5, 10):
            raise SimStartupError(
                f"Speculative decoding for {arch} is not compatible with radix cache when using "
                "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
                "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
            )
        out["disable_radix_cache"] = True
    elif out.get("attention_backend") == "trtllm_mha":
        out["disable_radix_cache"] = True
    else:
        out["disable_overlap_schedule"] = True
    return strategy


def _mamba_v14(out: dict[str, Any], arch: str, strategy: str, v: tuple[int, ...], spec: bool) -> str:
    """≥0.5.14 `handle_mamba_radix_cache` + mamba hook (auto picks extra_buffer where it can)."""
    if out["disable_radix_cache"]:
        return strategy  # resolution skipped; an explicit extra_buffer stays in the field, inert
    supported = arch in _EXTRA_BUFFER_ARCHS and out.get("linear_attn_backend", "triton") == "triton"
    if strategy == "auto":
        if supported and (not out["disable_overlap_schedule"] or out["page_size"] > 1):
            strategy = "extra_buffer"
        else:
            strategy = "no_buffer"
            out["disable_overlap_schedule"] = True
        return strategy
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        if not supported:
            raise SimStartupError(f"extra_buffer is not supported for {arch}; use no_buffer.", "AssertionError")
        if strategy == "extra_buffer_lazy" and spec and v < (0, 5, 19):
            raise SimStartupError("extra_buffer_lazy unsupported with spec.", "AssertionError")
        draft = out.get("speculative_num_draft_tokens")
        interval = out["mamba_track_interval"]
        if (draft is not None and interval < draft) or interval % out["page_size"]:
            raise SimStartupError("", "AssertionError")
        return strategy
    if not out["disable_overlap_schedule"]:
        raise SimStartupError(
            "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.", "AssertionError"
        )
    if out["page_size"] != 1:
        raise SimStartupError("no_buffer only supports page_size=1.", "AssertionError")
    if out.get("attention_backend") == "trtllm_mha":
        raise SimStartupError("no_buffer do not support trtllm_mha attention backend.", "AssertionError")
    return strategy


def _speculative(out: dict[str, Any], arch: str, v: tuple[int, ...], env: Mapping[str, str]) -> None:
    """Speculative decoding: NEXTN→EAGLE, auto (steps, topk, draft), draft=steps+1 at topk 1, 48 requests."""
    algo = str(out["speculative_algorithm"]).upper()
    if algo == "NEXTN":
        algo = "EAGLE"
    out["speculative_algorithm"] = algo
    if algo == "NGRAM":
        out["disable_overlap_schedule"] = True
    elif algo in _EAGLE_FAMILY:
        auto = (5, 4, 8) if arch.startswith(("Llama", "Grok")) else (3, 1, 4)
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
            out.setdefault("_warnings", []).append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
        _spec_overlap(out, v, env)
    if out.get("max_running_requests") is None:
        out["max_running_requests"] = 48
    out["enable_mixed_chunk"] = False
    if out.get("speculative_draft_model_path") is None and arch.startswith(("DeepseekV3", "Glm4Moe", "MiMo")):
        out["speculative_draft_model_path"] = out.get("model_path")


def _spec_overlap(out: dict[str, Any], v: tuple[int, ...], env: Mapping[str, str]) -> None:
    if v >= (0, 5, 14):
        return
    spec_v2 = _env_flag(env, "SGLANG_ENABLE_SPEC_V2", default=v >= (0, 5, 12))
    topk = out["speculative_eagle_topk"]
    if v >= (0, 5, 12):
        if topk > 1 or not spec_v2:
            out["disable_overlap_schedule"] = True
        return
    if not spec_v2:
        out["disable_overlap_schedule"] = True
    elif topk > 1:
        raise SimStartupError("Spec v2 currently only supports topk = 1 for speculative decoding.")


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
