"""pipeline.sglang: SGLang's release facts, checked against the rules shared/SGLANG.md cites from SGLang's source,
and the one-owner rule (no version literal, version parser or hybrid table elsewhere in the package)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pipeline.server import server_args
from pipeline.sglang import releases
from pipeline.sglang.capacity import capacity, mamba_slots_per_request
from pipeline.sglang.flags import RELEASES as FLAG_RELEASES
from pipeline.sglang.flags import flags_of
from pipeline.sglang.models import (
    EXTRA_BUFFER_ARCHS,
    HYBRID,
    architecture_of,
    is_hybrid,
    looks_hybrid,
    supports_extra_buffer,
)
from pipeline.sglang.releases import EMULATED, NEWEST, Release
from pipeline.sglang.resolution import Rule, StartupRefused, resolution, resolve, spec_v2_enabled

PIPELINE = Path(__file__).resolve().parent.parent / "pipeline"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5.10.post1", Release(0, 5, 10)),
        ("v0.5.23", Release(0, 5, 23)),
        (" 0.5.9", Release(0, 5, 9)),
        ("0.5", Release(0, 5, 0)),
        ("0.5.14rc1", Release(0, 5, 14)),
        ("1.0.0", Release(1, 0, 0)),
        (None, None),
        ("", None),
        ("dev", None),
        ("5", None),
    ],
    ids=["post", "v-prefix", "space", "two-parts", "rc", "major", "none", "empty", "word", "one-part"],
)
def test_a_release_is_parsed_from_what_servers_report(text: str | None, expected: Release | None) -> None:
    assert Release.parse(text) == expected


def test_releases_order_like_their_versions_and_print_as_one() -> None:
    ordered = [Release.of(v) for v in EMULATED]
    assert ordered == sorted(ordered)
    assert Release(0, 5, 10) > Release(0, 5, 9) and Release(0, 5, 10) < (0, 5, 12)
    assert str(Release.of("0.5.10.post1")) == "0.5.10" and f"{Release(0, 5, 23)}" == "0.5.23"
    assert Release.of(None) == NEWEST == Release.of("garbage")
    assert Release.of(None, Release(0, 5, 14)) == Release(0, 5, 14)


def _thresholds() -> dict[str, Release]:
    return {
        name: value
        for name, value in vars(releases).items()
        if name.isupper() and isinstance(value, Release) and name not in ("OLDEST", "NEWEST")
    }


def test_every_change_is_dated_by_a_release_regen_has_read() -> None:
    """A threshold that is not an emulated release is a typo: no rule can be checked against its source."""
    read = {Release.of(v) for v in EMULATED}
    thresholds = _thresholds()
    assert len(thresholds) >= 20
    assert {name: t for name, t in thresholds.items() if t not in read} == {}
    assert releases.OLDEST == min(read) and NEWEST == max(read)


def test_the_simulator_emulates_exactly_the_releases_with_a_flag_table() -> None:
    assert [EMULATED[v] for v in EMULATED if v != "0.5.15"] == list(FLAG_RELEASES)
    for version in EMULATED:
        assert flags_of(version), version
    assert releases.reported_version("0.5.10") == "0.5.10.post1"


# shared/SGLANG.md section 5, the mamba timeline: the flag and /server_info key changed in 0.5.14, and 0.5.23
# rejects the old name (`server_args.py` 0.5.9-0.5.12; `arg_groups/` from 0.5.14; `overrides.py` 0.5.23).
@pytest.mark.parametrize(
    ("version", "key", "old_flag_accepted", "new_flag_accepted"),
    [
        ("0.5.9", "mamba_scheduler_strategy", True, False),
        ("0.5.10.post1", "mamba_scheduler_strategy", True, False),
        ("0.5.12", "mamba_scheduler_strategy", True, False),
        ("0.5.14", "mamba_radix_cache_strategy", True, True),
        ("0.5.19", "mamba_radix_cache_strategy", True, True),
        ("0.5.23", "mamba_radix_cache_strategy", False, True),
    ],
)
def test_the_mamba_flag_per_release(version: str, key: str, old_flag_accepted: bool, new_flag_accepted: bool) -> None:
    assert server_args.mamba_key(version) == key
    flags = flags_of(version)
    assert ("mamba-scheduler-strategy" in flags) is old_flag_accepted
    assert ("mamba-radix-cache-strategy" in flags) is new_flag_accepted
    model = {"model_path": "Qwen/Qwen3.6-27B"}
    for flag, accepted in (
        ("mamba_scheduler_strategy", old_flag_accepted),
        ("mamba_radix_cache_strategy", new_flag_accepted),
    ):
        if accepted:
            assert resolve({**model, flag: "extra_buffer"}, version, env={})
        else:
            with pytest.raises(StartupRefused, match="unrecognized arguments") as refused:
                resolve({**model, flag: "extra_buffer"}, version, env={})
            assert refused.value.exit_code == 2


# SGLANG_ENABLE_SPEC_V2: default False on 0.5.9 and 0.5.10.post1, True on 0.5.12; gone from 0.5.14.
@pytest.mark.parametrize(
    ("version", "default"), [("0.5.9", False), ("0.5.10", False), ("0.5.12", True)], ids=["0.5.9", "0.5.10", "0.5.12"]
)
def test_spec_v2_default_per_release(version: str, default: bool) -> None:
    v = Release.of(version)
    assert spec_v2_enabled({}, v) is default
    assert spec_v2_enabled({"SGLANG_ENABLE_SPEC_V2": "1"}, v) is True
    assert spec_v2_enabled({"SGLANG_ENABLE_SPEC_V2": "0"}, v) is False


# `auto` resolves to no_buffer up to 0.5.12 (`_handle_missing_default_values`) and to extra_buffer from 0.5.14 on
# a supported arch with the overlap schedule on (`_mamba_radix_cache_resolution`).
@pytest.mark.parametrize("version", list(EMULATED))
def test_auto_strategy_per_release(version: str) -> None:
    resolved = resolve({"model_path": "Qwen/Qwen3.6-27B"}, version, env={})
    key = server_args.mamba_key(version)
    assert key is not None
    expected = "extra_buffer" if Release.of(version) >= releases.MAMBA_FLAG_RENAMED else "no_buffer"
    assert resolved[key] == expected
    assert resolved["disable_overlap_schedule"] is (expected == "no_buffer")


# Section 5, effective concurrency: ratio 1 with radix off; else 3, + extra_buffer's tracking slots: 0.5.9 +1 with
# spec / +2 without; from 0.5.10 +2 with the overlap scheduler on / +1 off; extra_buffer_lazy +1; from 0.5.19
# SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 drops the base to 2.
@pytest.mark.parametrize(
    ("version", "resolved", "env", "slots"),
    [
        ("0.5.9", {"disable_radix_cache": True, "mamba_scheduler_strategy": "extra_buffer"}, {}, 1),
        ("0.5.9", {"mamba_scheduler_strategy": "no_buffer"}, {}, 3),
        ("0.5.9", {"mamba_scheduler_strategy": "extra_buffer", "speculative_algorithm": "EAGLE"}, {}, 4),
        ("0.5.9", {"mamba_scheduler_strategy": "extra_buffer"}, {}, 5),
        ("0.5.10", {"mamba_scheduler_strategy": "extra_buffer", "speculative_algorithm": "EAGLE"}, {}, 5),
        ("0.5.12", {"mamba_scheduler_strategy": "extra_buffer", "disable_overlap_schedule": True}, {}, 4),
        ("0.5.14", {"mamba_radix_cache_strategy": "extra_buffer_lazy"}, {}, 4),
        ("0.5.19", {"mamba_radix_cache_strategy": "extra_buffer"}, {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "1"}, 4),
        ("0.5.19", {"mamba_radix_cache_strategy": "no_buffer"}, {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "1"}, 3),
        ("0.5.14", {"mamba_radix_cache_strategy": "extra_buffer"}, {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "1"}, 5),
    ],
    ids=[
        "radix-off",
        "0.5.9-no_buffer",
        "0.5.9-extra-spec",
        "0.5.9-extra",
        "0.5.10-extra-spec-overlap",
        "0.5.12-extra-overlap-off",
        "0.5.14-lazy",
        "0.5.19-skip-lock",
        "0.5.19-skip-lock-no_buffer",
        "0.5.14-skip-lock-ignored",
    ],
)
def test_mamba_slots_per_request(version: str, resolved: dict[str, object], env: dict[str, str], slots: int) -> None:
    assert mamba_slots_per_request(resolved, version, env) == slots


@pytest.mark.parametrize(("version", "requests"), [("0.5.9", 6), ("0.5.10", 4), ("0.5.23", 4)])
def test_the_capacity_example_of_sglang_md(version: str, requests: int) -> None:
    """spec + overlap on + --max-mamba-cache-size 24: min(48, 24 // 5) = 4 on >=0.5.10, 6 on 0.5.9."""
    key = server_args.mamba_key(version)
    assert key is not None
    resolved = {key: "extra_buffer", "speculative_algorithm": "EAGLE", "max_running_requests": 48}
    cap = capacity({**resolved, "max_mamba_cache_size": 24}, version, hybrid=True)
    assert (cap.requests, cap.limit, cap.flag) == (requests, "mamba_cache", "--max-mamba-cache-size")
    assert capacity(resolved, version, hybrid=False).requests == 48


# Section 5: the extra-buffer architectures of 0.5.23 `overrides.py::_MAMBA_EXTRA_BUFFER_ARCHS` among the hybrids
# regen knows, and NemotronH / FalconH1 / GraniteMoeHybrid hybrid without it.
@pytest.mark.parametrize(
    ("model", "architecture", "hybrid", "extra_buffer"),
    [
        ("Qwen/Qwen3.6-27B", "Qwen3_5ForConditionalGeneration", True, True),
        ("Qwen/Qwen3.5-35B-A3B", "Qwen3_5MoeForConditionalGeneration", True, True),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen3NextForCausalLM", True, True),
        ("nvidia/Nemotron-H-8B", "NemotronHForCausalLM", True, False),
        ("tiiuae/Falcon-H1-7B", "FalconH1ForCausalLM", True, False),
        ("ibm-granite/granite-4.0-h-small", "GraniteMoeHybridForCausalLM", True, False),
        ("Qwen/Qwen3-8B", "Qwen3ForCausalLM", False, False),
        ("meta-llama/Llama-3.1-8B", "LlamaForCausalLM", False, False),
    ],
)
def test_one_table_of_hybrid_models(model: str, architecture: str, hybrid: bool, extra_buffer: bool) -> None:
    assert architecture_of(model) == architecture
    assert looks_hybrid(model) is hybrid is is_hybrid(architecture)
    assert supports_extra_buffer(model) is extra_buffer is (architecture in EXTRA_BUFFER_ARCHS)


def test_the_table_and_the_architectures_agree() -> None:
    for tag, entry in HYBRID.items():
        assert is_hybrid(entry.architecture), tag
        assert (entry.architecture in EXTRA_BUFFER_ARCHS) is entry.extra_buffer, tag


# ---------------------------------------------------------------- one owner


def _version_literals(tree: ast.AST) -> list[int]:
    """Lines of tuple literals that read as an SGLang version: (0, 5) or (0, 5, N)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and 2 <= len(node.elts) <= 3:
            values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if values[:2] == [0, 5] and all(isinstance(v, int) for v in values):
                out.append(node.lineno)
    return sorted(out)


def test_no_version_literal_outside_the_release_facts() -> None:
    found = {
        str(path.relative_to(PIPELINE)): lines
        for path in sorted(PIPELINE.rglob("*.py"))
        if "sglang" not in path.relative_to(PIPELINE).parts[:1]
        and (lines := _version_literals(ast.parse(path.read_text())))
    }
    assert found == {}, "name the change in pipeline/sglang/releases.py and compare with it"


def test_the_fact_check_above_can_fail() -> None:
    assert _version_literals(ast.parse("if v >= (0, 5, 14):\n    pass\nx = (0, 5)\n")) == [1, 3]
    assert _version_literals(ast.parse("x = (0, 6, 1)\ny = (1, 2)\n")) == []


# ---------------------------------------------------------------- releases written from the thresholds


@pytest.mark.parametrize(
    ("first", "until", "text"),
    [
        (None, releases.MAMBA_FLAG_RENAMED, "≤0.5.12"),
        (releases.MAMBA_FLAG_RENAMED, None, "≥0.5.14"),
        (releases.EXTRA_BUFFER_REFUSES_RADIX_OFF, releases.MAMBA_FLAG_RENAMED, "0.5.10-0.5.12"),
        (None, releases.NO_BUFFER_SPEC_REFUSED, "0.5.9"),
        (releases.PD_DECODE_DROPS_EXTRA_BUFFER, releases.MAMBA_HOOK, "0.5.12"),
        (releases.OLD_MAMBA_FLAG_REJECTED, None, "0.5.23"),
    ],
    ids=["until", "since", "between", "oldest-only", "one-release", "newest-only"],
)
def test_a_span_of_releases_is_written_from_its_thresholds(
    first: Release | None, until: Release | None, text: str
) -> None:
    assert releases.span(first, until) == text


def test_a_span_without_a_release_is_an_error() -> None:
    with pytest.raises(ValueError, match="no release"):
        releases.span(releases.NEWEST, releases.NEWEST)


# ---------------------------------------------------------------- every refusal and silent change, by rule


def test_resolution_names_every_refusal_where_resolve_stops_at_the_first() -> None:
    args = {"model_path": "nvidia/Nemotron-H-8B", "mamba_radix_cache_strategy": "extra_buffer"}
    args |= {"disable_radix_cache": True, "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2}
    env = {"SGLANG_ENABLE_SPEC_V2": "1"}
    outcome = resolution(args, "0.5.10", env)
    assert [r.rule for r in outcome.refusals] == [
        Rule.NEW_MAMBA_FLAG,
        Rule.EXTRA_BUFFER_ARCH,
        Rule.EXTRA_BUFFER_RADIX_OFF,
        Rule.SPEC_V2_TOPK,
    ]
    with pytest.raises(StartupRefused) as first:
        resolve(args, "0.5.10", env)
    assert first.value.rule is Rule.NEW_MAMBA_FLAG and first.value.message == outcome.refusals[0].message


@pytest.mark.parametrize(
    ("args", "version", "env", "changes"),
    [
        ({"model_path": "Qwen/Qwen3.6-27B"}, "0.5.12", {}, [Rule.AUTO_NO_BUFFER]),
        ({"model_path": "Qwen/Qwen3.6-27B", "speculative_algorithm": "NEXTN"}, "0.5.9", {},
         [Rule.AUTO_NO_BUFFER, Rule.RADIX_OFF_FOR_SPEC, Rule.NEXTN_AS_EAGLE, Rule.SPEC_V2_OFF]),
        ({"model_path": "Qwen/Qwen3.6-27B", "mamba_scheduler_strategy": "extra_buffer", "disable_radix_cache": True},
         "0.5.19", {"SGLANG_ENABLE_SPEC_V2": "1"},
         [Rule.MAMBA_FLAG_ALIAS, Rule.EXTRA_BUFFER_INERT, Rule.SPEC_V2_ENV_IGNORED]),
        ({"model_path": "Qwen/Qwen3-8B", "speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 6}, "0.5.23",
         {}, [Rule.DRAFT_TOKENS_ADJUSTED]),
        ({"model_path": "Qwen/Qwen3-8B", "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2}, "0.5.12",
         {}, [Rule.SPEC_V1_TOPK]),
    ],
    ids=["auto-0.5.12", "nextn-0.5.9", "alias-inert-0.5.19", "draft-0.5.23", "topk-0.5.12"],
)  # fmt: skip
def test_resolution_names_each_silent_change(
    args: dict[str, object], version: str, env: dict[str, str], changes: list[Rule]
) -> None:
    outcome = resolution(args, version, env)
    assert outcome.refusals == []
    assert outcome.changes == changes
    assert outcome.args == resolve(args, version, env)
