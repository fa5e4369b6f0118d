"""Known-bad launch combinations for a target SGLang version, found before anything starts (`known_bad`), and
the capacity a launch will have (`expected_capacity`): what `regen launch --dry-run` and preflight's launch
expectations report. Key names per version are server_args.py; the release facts (versions, the spec v2 switch,
hybrid models, each release's resolution and capacity rules) are `pipeline.sglang`'s, which the simulator plays
too, so the three agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sglang.capacity import SPEC_DEFAULT_MAX_RUNNING, Capacity, capacity
from ..sglang.models import architecture_of, is_hybrid, looks_hybrid, supports_extra_buffer
from ..sglang.releases import (
    EXTRA_BUFFER_LAZY,
    EXTRA_BUFFER_REFUSES_RADIX_OFF,
    MAMBA_FLAG_RENAMED,
    NO_BUFFER_SPEC_REFUSED,
    OLD_MAMBA_FLAG_REJECTED,
    SPEC_V2_DEFAULT_ON,
    SPEC_V2_ENV_REMOVED,
    Release,
)
from ..sglang.resolution import SPEC_V2_ENV, StartupRefused, resolve, spec_v2_enabled
from .server_args import MAMBA_KEYS, MAMBA_NEW, MAMBA_OLD, same_value, server_key


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
    v = Release.parse(version)
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
    except StartupRefused as exc:
        return [_problem("sglang", f"SGLang {version} refuses to start ({exc.kind}: {exc.message})", "see above", True)]
    return []


def expected_capacity(args: Mapping[str, Any], env: Mapping[str, str], version: str | None) -> Capacity | None:
    """How many requests a server launched with `args` (flag spellings) will run at once, and what caps it;
    None when the version is unknown or SGLang would refuse the launch."""
    if Release.parse(version) is None:
        return None
    given = {server_key(k): v for k, v in args.items() if v is not False and v is not None}
    try:
        resolved = resolve(given, str(version), env)
    except StartupRefused:
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


def _flag_names(given: Mapping[str, Any], v: Release) -> list[dict[str, Any]]:
    shown = str(v)
    out = []
    if MAMBA_OLD in given and v >= OLD_MAMBA_FLAG_REJECTED:
        out.append(
            _problem(
                "mamba-scheduler-strategy",
                f"SGLang {shown} rejects --mamba-scheduler-strategy (unrecognized argument)",
                "use --mamba-radix-cache-strategy (same values)",
                True,
            )
        )
    elif MAMBA_OLD in given and v >= MAMBA_FLAG_RENAMED:
        out.append(
            _problem(
                "mamba-scheduler-strategy",
                f"--mamba-scheduler-strategy is a deprecated alias on {shown}",
                "use --mamba-radix-cache-strategy; 0.5.23 rejects the old name",
                False,
            )
        )
    if MAMBA_NEW in given and v < MAMBA_FLAG_RENAMED:
        out.append(
            _problem(
                "mamba-radix-cache-strategy",
                f"SGLang {shown} has no --mamba-radix-cache-strategy",
                "use --mamba-scheduler-strategy (≤0.5.12)",
                True,
            )
        )
    strategy = _strategy(given)[1]
    if strategy == "extra_buffer_lazy" and v < EXTRA_BUFFER_LAZY:
        out.append(
            _problem(
                "mamba-scheduler-strategy", f"extra_buffer_lazy does not exist on {shown}", "use extra_buffer", True
            )
        )
    return out


def _mamba(given: Mapping[str, Any], env: Mapping[str, str], v: Release) -> list[dict[str, Any]]:
    flag, strategy = _strategy(given)
    model = str(given.get("model_path") or "")
    if model and not looks_hybrid(model):
        return []
    name = "--" + (flag or (MAMBA_OLD if v < MAMBA_FLAG_RENAMED else MAMBA_NEW)).replace("_", "-")
    spec = bool(given.get("speculative_algorithm"))
    radix_off = bool(given.get("disable_radix_cache"))
    out = []
    if strategy == "extra_buffer" and model and not supports_extra_buffer(model):
        out.append(_problem(name, f"{model} does not support extra_buffer", "use no_buffer", True))
    if v < MAMBA_FLAG_RENAMED:
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
    env: Mapping[str, str], v: Release, name: str, strategy: str, spec: bool, radix_off: bool
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
    if strategy == "extra_buffer" and spec and v < SPEC_V2_DEFAULT_ON and not spec_v2_enabled(env, v):
        out.append(
            _problem(
                SPEC_V2_ENV,
                f"on {v} extra_buffer with speculative decoding needs {SPEC_V2_ENV}=1 "
                "(without it SGLang runs spec v1 with the overlap schedule off)",
                f'add {SPEC_V2_ENV} = "1" to [launch].env',
                False,
            )
        )
    return out


def _old_radix_cache(v: Release, name: str, strategy: str, spec: bool, radix_off: bool) -> list[dict[str, Any]]:
    """The strategies SGLang 0.5.9-0.5.12 refuses, or quietly undoes, with the radix cache on or off."""
    out = []
    if strategy == "extra_buffer" and radix_off and v >= EXTRA_BUFFER_REFUSES_RADIX_OFF:
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
    if v >= NO_BUFFER_SPEC_REFUSED:
        out.append(
            _problem(
                name,
                "no_buffer (auto) with speculative decoding and the radix cache is refused on 0.5.10-0.5.12 "
                "(ValueError at start)",
                f"pass {name} extra_buffer"
                + (f" and {SPEC_V2_ENV}=1" if v < SPEC_V2_DEFAULT_ON else "")
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


def _speculative(given: Mapping[str, Any], env: Mapping[str, str], v: Release) -> list[dict[str, Any]]:
    out = []
    if SPEC_V2_ENV in env and v >= SPEC_V2_ENV_REMOVED:
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
    if isinstance(topk, int) and topk > 1 and v < SPEC_V2_DEFAULT_ON and spec_v2_enabled(env, v):
        out.append(
            _problem(
                "speculative-eagle-topk",
                f"with {SPEC_V2_ENV}=1, SGLang {v} refuses speculative-eagle-topk {topk}: "
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
    given: Mapping[str, Any], expect: Mapping[str, Any], v: Release | None, concurrency: int | None
) -> list[dict[str, Any]]:
    out = []
    spec = given.get("speculative_algorithm")
    for name, wanted in expect.items():
        key = server_key(name)
        flag = key.replace("_", "-")
        launched = given.get(key)
        if key in MAMBA_KEYS:
            launched = _strategy(given)[1]
            if launched == "auto" and wanted == "extra_buffer" and v is not None and v < MAMBA_FLAG_RENAMED:
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
    if spec and "max_running_requests" not in given and concurrency and concurrency > SPEC_DEFAULT_MAX_RUNNING:
        out.append(
            _problem(
                "max-running-requests",
                f"with speculative decoding SGLang runs at most {SPEC_DEFAULT_MAX_RUNNING} requests, "
                f"the endpoint is configured for {concurrency}",
                f"set max-running-requests = {concurrency}, or lower endpoints.concurrency",
                False,
            )
        )
    return out
