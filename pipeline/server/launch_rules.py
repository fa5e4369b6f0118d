"""Known-bad launch combinations for a target SGLang version, found before anything starts (`known_bad`), and
the capacity a launch will have (`expected_capacity`): what `regen launch --dry-run` and preflight's launch
expectations report. Whether SGLang refuses a launch, or changes it silently, is `pipeline.sglang.resolution`'s to
say (the rules the simulator plays too); this module asks it and words the advice: which key to blame, what to
write instead. Key names per version are server_args.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..sglang.capacity import SPEC_DEFAULT_MAX_RUNNING, Capacity, capacity, mamba_strategy
from ..sglang.models import HYBRID, architecture_of, is_hybrid
from ..sglang.releases import (
    AUTO_PICKS_EXTRA_BUFFER,
    EXTRA_BUFFER_INERT_WITHOUT_RADIX,
    EXTRA_BUFFER_REFUSES_RADIX_OFF,
    MAMBA_FLAG_RENAMED,
    MAMBA_HOOK,
    NO_BUFFER_NEEDS_OVERLAP_OFF,
    NO_BUFFER_SPEC_REFUSED,
    OLD_MAMBA_FLAG_REJECTED,
    SPEC_V2_DEFAULT_ON,
    SPEC_V2_ENV_REMOVED,
    Release,
    span,
)
from ..sglang.resolution import SPEC_V2_ENV, Resolution, Rule, StartupRefused, resolution, resolve
from .server_args import MAMBA_KEYS, mamba_key, same_value, server_key

# A launch that names no model is checked as a hybrid model with an extra buffer, so that no mamba rule is skipped.
_UNNAMED_MODEL_ARCH = HYBRID["qwen3-next"].architecture


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
    outcome = None
    if Release.parse(version) is None:
        problems.append(
            _problem(
                "sglang_version",
                "the target SGLang version is unknown: version-specific checks skipped",
                "set launch.sglang_version (or install sglang where regen runs)",
                False,
            )
        )
    else:
        checked = given if given.get("model_path") else {**given, "architecture": _UNNAMED_MODEL_ARCH}
        outcome = resolution(checked, str(version), env)
        worded = _advice(_Launch.of(given, outcome, str(version)))
        problems += list(worded.values())
        if not any(p["fatal"] for p in problems):
            problems += _refusal(outcome, str(version), worded)
    return problems + _expectations(given, expect or {}, outcome, concurrency)


def _refusal(outcome: Resolution, version: str, worded: Mapping[Rule, Any]) -> list[dict[str, Any]]:
    """The first startup refusal that no advice below words, in SGLang's own message."""
    for exc in outcome.refusals:
        if exc.rule not in worded:
            return [
                _problem("sglang", f"SGLang {version} refuses to start ({exc.kind}: {exc.message})", "see above", True)
            ]
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


@dataclass(frozen=True)
class _Launch:
    """A launch as the advice reads it: the args as given, what SGLang `v` makes of them, and the mamba strategy
    flag to name (the one given, else the one this release has)."""

    given: Mapping[str, Any]
    outcome: Resolution
    v: Release
    flag: str

    @classmethod
    def of(cls, given: Mapping[str, Any], outcome: Resolution, version: str) -> _Launch:
        flag = "--" + str(_strategy(given)[0] or mamba_key(version)).replace("_", "-")
        return cls(given, outcome, Release.of(version), flag)

    @property
    def resolved(self) -> dict[str, Any]:
        return self.outcome.args

    @property
    def strategy(self) -> str:
        """The mamba strategy SGLang resolved."""
        return mamba_strategy(self.resolved)


_Advice = Callable[[_Launch], dict[str, Any] | None]


def _advice(launch: _Launch) -> dict[Rule, dict[str, Any]]:
    """A problem for each rule the launch meets that has advice here, in the order of `_ADVICE`."""
    met = {*launch.outcome.changes, *(r.rule for r in launch.outcome.refusals)}
    found = {rule: word(launch) for rule, word in _ADVICE.items() if rule in met}
    return {rule: problem for rule, problem in found.items() if problem is not None}


def _old_flag(launch: _Launch) -> dict[str, Any]:
    return _problem(
        "mamba-scheduler-strategy",
        f"SGLang {launch.v} rejects --mamba-scheduler-strategy (unrecognized argument)",
        "use --mamba-radix-cache-strategy (same values)",
        True,
    )


def _flag_alias(launch: _Launch) -> dict[str, Any]:
    return _problem(
        "mamba-scheduler-strategy",
        f"--mamba-scheduler-strategy is a deprecated alias on {launch.v}",
        f"use --mamba-radix-cache-strategy; {OLD_MAMBA_FLAG_REJECTED} rejects the old name",
        False,
    )


def _new_flag(launch: _Launch) -> dict[str, Any]:
    return _problem(
        "mamba-radix-cache-strategy",
        f"SGLang {launch.v} has no --mamba-radix-cache-strategy",
        f"use --mamba-scheduler-strategy ({span(until=MAMBA_FLAG_RENAMED)})",
        True,
    )


def _no_lazy(launch: _Launch) -> dict[str, Any]:
    return _problem(
        "mamba-scheduler-strategy", f"extra_buffer_lazy does not exist on {launch.v}", "use extra_buffer", True
    )


def _extra_buffer_arch(launch: _Launch) -> dict[str, Any] | None:
    if _strategy(launch.given)[1] != "extra_buffer":
        return None  # extra_buffer_lazy: SGLang's own words
    model = launch.given.get("model_path")
    return _problem(launch.flag, f"{model} does not support extra_buffer", "use no_buffer", True)


def _auto_no_buffer(launch: _Launch) -> dict[str, Any]:
    return _problem(
        launch.flag,
        f"auto resolves to no_buffer on SGLang {span(until=AUTO_PICKS_EXTRA_BUFFER)} (overlap schedule off)",
        f"pass {launch.flag} extra_buffer explicitly",
        False,
    )


def _extra_buffer_radix_off(launch: _Launch) -> dict[str, Any]:
    refused = span(EXTRA_BUFFER_REFUSES_RADIX_OFF, EXTRA_BUFFER_INERT_WITHOUT_RADIX)
    return _problem(
        launch.flag,
        f"extra_buffer with --disable-radix-cache is refused on {refused} (ValueError)",
        "use no_buffer with disable-radix-cache, or drop disable-radix-cache",
        True,
    )


def _no_buffer_spec_radix(launch: _Launch) -> dict[str, Any]:
    env = f" and {SPEC_V2_ENV}=1" if launch.v < SPEC_V2_DEFAULT_ON else ""
    return _problem(
        launch.flag,
        f"no_buffer (auto) with speculative decoding and the radix cache is refused on "
        f"{span(NO_BUFFER_SPEC_REFUSED, MAMBA_HOOK)} (ValueError at start)",
        f"pass {launch.flag} extra_buffer{env}, or disable-radix-cache = true",
        True,
    )


def _radix_off_for_spec(launch: _Launch) -> dict[str, Any]:
    return _problem(
        launch.flag,
        f"SGLang {span(until=NO_BUFFER_SPEC_REFUSED)} silently disables the radix cache for no_buffer + "
        "speculative decoding",
        f"pass {launch.flag} extra_buffer",
        False,
    )


def _spec_v2_off(launch: _Launch) -> dict[str, Any] | None:
    if not is_hybrid(launch.resolved["architecture"]) or launch.strategy != "extra_buffer":
        return None  # the overlap schedule matters here to the extra buffer's slots
    return _problem(
        SPEC_V2_ENV,
        f"on {launch.v} extra_buffer with speculative decoding needs {SPEC_V2_ENV}=1 "
        "(without it SGLang runs spec v1 with the overlap schedule off)",
        f'add {SPEC_V2_ENV} = "1" to [launch].env',
        False,
    )


def _no_buffer_overlap(launch: _Launch) -> dict[str, Any]:
    return _problem(
        launch.flag,
        f"an explicit no_buffer needs --disable-overlap-schedule on SGLang {span(NO_BUFFER_NEEDS_OVERLAP_OFF)} "
        "(AssertionError at start)",
        "add disable-overlap-schedule = true, or use auto / extra_buffer",
        True,
    )


def _extra_buffer_inert(launch: _Launch) -> dict[str, Any] | None:
    if launch.strategy != "extra_buffer":
        return None
    return _problem(
        launch.flag,
        f"extra_buffer is inert with --disable-radix-cache on {span(EXTRA_BUFFER_INERT_WITHOUT_RADIX)}",
        "drop disable-radix-cache to use the extra buffer",
        False,
    )


def _spec_v2_env_ignored(launch: _Launch) -> dict[str, Any]:
    return _problem(
        SPEC_V2_ENV,
        f"{SPEC_V2_ENV} has no effect on SGLang {span(SPEC_V2_ENV_REMOVED)} (spec v2 always)",
        "remove it; use --disable-overlap-schedule for the synchronous path",
        False,
    )


def _draft_tokens(launch: _Launch) -> dict[str, Any] | None:
    if launch.given.get("speculative_num_draft_tokens") is None:
        return None  # SGLang changes its own choice, not the launch's
    draft = launch.resolved["speculative_num_draft_tokens"]
    return _problem(
        "speculative-num-draft-tokens",
        f"SGLang changes it to {draft} at topk 1",
        f"set speculative-num-draft-tokens = {draft}",
        False,
    )


def _spec_v2_topk(launch: _Launch) -> dict[str, Any] | None:
    topk = launch.given.get("speculative_eagle_topk")
    if topk is None:
        return None  # SGLang's own choice of topk: SGLang's own words
    return _problem(
        "speculative-eagle-topk",
        f"with {SPEC_V2_ENV}=1, SGLang {launch.v} refuses speculative-eagle-topk {topk}: "
        "'Spec v2 currently only supports topk = 1 for speculative decoding.' (ValueError at start)",
        f"set speculative-eagle-topk = 1, or drop {SPEC_V2_ENV} (spec v1: the overlap scheduler off)",
        True,
    )


def _nextn(launch: _Launch) -> dict[str, Any]:
    return _problem(
        "speculative-algorithm", "SGLang runs NEXTN as EAGLE and reports EAGLE", 'write "EAGLE" in [expect]', False
    )


# The advice for each rule of `pipeline.sglang.resolution`, in the order a launch's problems are listed. A refusal
# whose rule is not here, or whose advice declines (None), is reported in SGLang's own words (`_refusal`).
_ADVICE: dict[Rule, _Advice] = {
    Rule.OLD_MAMBA_FLAG: _old_flag,
    Rule.MAMBA_FLAG_ALIAS: _flag_alias,
    Rule.NEW_MAMBA_FLAG: _new_flag,
    Rule.NO_EXTRA_BUFFER_LAZY: _no_lazy,
    Rule.EXTRA_BUFFER_ARCH: _extra_buffer_arch,
    Rule.AUTO_NO_BUFFER: _auto_no_buffer,
    Rule.EXTRA_BUFFER_RADIX_OFF: _extra_buffer_radix_off,
    Rule.NO_BUFFER_SPEC_RADIX: _no_buffer_spec_radix,
    Rule.RADIX_OFF_FOR_SPEC: _radix_off_for_spec,
    Rule.SPEC_V2_OFF: _spec_v2_off,
    Rule.NO_BUFFER_OVERLAP: _no_buffer_overlap,
    Rule.EXTRA_BUFFER_INERT: _extra_buffer_inert,
    Rule.SPEC_V2_ENV_IGNORED: _spec_v2_env_ignored,
    Rule.DRAFT_TOKENS_ADJUSTED: _draft_tokens,
    Rule.SPEC_V2_TOPK: _spec_v2_topk,
    Rule.NEXTN_AS_EAGLE: _nextn,
}


def _expectations(
    given: Mapping[str, Any], expect: Mapping[str, Any], outcome: Resolution | None, concurrency: int | None
) -> list[dict[str, Any]]:
    out = []
    spec = given.get("speculative_algorithm")
    for name, wanted in expect.items():
        key = server_key(name)
        flag = key.replace("_", "-")
        launched = given.get(key)
        if key in MAMBA_KEYS:
            launched = _strategy(given)[1]
            auto_no_buffer = outcome is not None and Rule.AUTO_NO_BUFFER in outcome.changes
            if launched == "auto" and wanted == "extra_buffer" and auto_no_buffer:
                out.append(
                    _problem(
                        flag,
                        "[expect] wants extra_buffer but auto resolves to no_buffer on "
                        + span(until=AUTO_PICKS_EXTRA_BUFFER),
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
