"""Server-arg resolution per simulated SGLang version (shared/SGLANG.md section 5)."""

from __future__ import annotations

import pytest

from pipeline.sim import SimConfig, SimStartupError, resolve

QWEN35 = "Qwen/Qwen3.6-27B"  # hybrid mamba, extra_buffer capable
NEMOTRON = "nvidia/Nemotron-H-8B"  # hybrid mamba, no extra_buffer
DENSE = "Qwen/Qwen3-8B"


def _args(**kw: object) -> dict[str, object]:
    return {"model_path": QWEN35, **kw}


def test_served_model_name_defaults_to_model_path() -> None:
    assert resolve(_args(), "0.5.23", env={})["served_model_name"] == QWEN35
    assert resolve(_args(served_model_name="x"), "0.5.23", env={})["served_model_name"] == "x"


@pytest.mark.parametrize(
    ("version", "key", "value", "overlap_off"),
    [
        ("0.5.9", "mamba_scheduler_strategy", "no_buffer", True),
        ("0.5.10", "mamba_scheduler_strategy", "no_buffer", True),
        ("0.5.12", "mamba_scheduler_strategy", "no_buffer", True),
        ("0.5.14", "mamba_radix_cache_strategy", "extra_buffer", False),
        ("0.5.19", "mamba_radix_cache_strategy", "extra_buffer", False),
        ("0.5.23", "mamba_radix_cache_strategy", "extra_buffer", False),
    ],
    ids=["0.5.9", "0.5.10", "0.5.12", "0.5.14", "0.5.19", "0.5.23"],
)
def test_mamba_auto_resolution(version: str, key: str, value: str, overlap_off: bool) -> None:
    out = resolve(_args(), version, env={})
    assert out[key] == value
    assert out["disable_overlap_schedule"] is overlap_off
    other = {"mamba_scheduler_strategy", "mamba_radix_cache_strategy"} - {key}
    assert other.pop() not in out


def test_auto_is_no_buffer_and_overlap_off_without_extra_buffer_support() -> None:
    out = resolve({"model_path": NEMOTRON}, "0.5.23", env={})
    assert out["mamba_radix_cache_strategy"] == "no_buffer"
    assert out["disable_overlap_schedule"] is True


def test_old_flag_rejected_on_0_5_23_like_argparse() -> None:
    with pytest.raises(SimStartupError) as info:
        resolve(_args(mamba_scheduler_strategy="extra_buffer"), "0.5.23", env={})
    assert info.value.kind == "argparse"
    assert info.value.exit_code == 2
    assert info.value.message == "unrecognized arguments: --mamba-scheduler-strategy extra_buffer"


def test_new_flag_unknown_before_0_5_14() -> None:
    with pytest.raises(SimStartupError, match="unrecognized arguments: --mamba-radix-cache-strategy"):
        resolve(_args(mamba_radix_cache_strategy="extra_buffer"), "0.5.12", env={})


def test_old_flag_is_an_alias_on_0_5_19() -> None:
    out = resolve(_args(mamba_scheduler_strategy="extra_buffer"), "0.5.19", env={})
    assert out["mamba_radix_cache_strategy"] == "extra_buffer"
    assert "mamba_scheduler_strategy" not in out


@pytest.mark.parametrize("version", ["0.5.10", "0.5.12"])
def test_no_buffer_spec_radix_rejected_on_0_5_10_to_12(version: str) -> None:
    with pytest.raises(SimStartupError) as info:
        resolve(_args(speculative_algorithm="EAGLE"), version, env={})
    assert info.value.kind == "ValueError"
    assert info.value.message.startswith(
        "Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache when using "
        "--mamba-scheduler-strategy no_buffer.To use radix cache"
    )


def test_spec_on_0_5_9_silently_disables_radix_cache() -> None:
    out = resolve(_args(speculative_algorithm="EAGLE"), "0.5.9", env={})
    assert out["disable_radix_cache"] is True
    assert out["mamba_scheduler_strategy"] == "no_buffer"


def test_spec_with_extra_buffer_on_0_5_10_needs_spec_v2_for_overlap() -> None:
    args = _args(speculative_algorithm="EAGLE", mamba_scheduler_strategy="extra_buffer")
    assert resolve(args, "0.5.10", env={})["disable_overlap_schedule"] is True
    assert resolve(args, "0.5.10", env={"SGLANG_ENABLE_SPEC_V2": "1"})["disable_overlap_schedule"] is False
    assert resolve(args, "0.5.12", env={})["disable_overlap_schedule"] is False  # default True in 0.5.12


def test_spec_defaults_nextn_draft_tokens_and_48() -> None:
    out = resolve(_args(speculative_algorithm="NEXTN"), "0.5.23", env={})
    assert out["speculative_algorithm"] == "EAGLE"
    assert (out["speculative_num_steps"], out["speculative_eagle_topk"], out["speculative_num_draft_tokens"]) == (
        3,
        1,
        4,
    )
    assert out["max_running_requests"] == 48
    out = resolve(
        _args(speculative_algorithm="EAGLE", speculative_num_steps=2, speculative_num_draft_tokens=8), "0.5.23", env={}
    )
    assert out["speculative_num_draft_tokens"] == 3  # steps + 1 at topk 1
    assert (
        resolve(_args(speculative_algorithm="EAGLE", max_running_requests=8), "0.5.23", env={})["max_running_requests"]
        == 8
    )


def test_explicit_no_buffer_needs_disable_overlap_on_0_5_14_plus() -> None:
    with pytest.raises(SimStartupError, match="no_buffer do not support overlap schedule"):
        resolve(_args(mamba_radix_cache_strategy="no_buffer"), "0.5.23", env={})
    out = resolve(_args(mamba_radix_cache_strategy="no_buffer", disable_overlap_schedule=True), "0.5.23", env={})
    assert out["mamba_radix_cache_strategy"] == "no_buffer"


def test_extra_buffer_rejections() -> None:
    with pytest.raises(SimStartupError, match="extra_buffer is not supported for NemotronHForCausalLM; use no_buffer."):
        resolve({"model_path": NEMOTRON, "mamba_radix_cache_strategy": "extra_buffer"}, "0.5.23", env={})
    with pytest.raises(SimStartupError, match="mamba extra_buffer is not supported for NemotronHForCausalLM model"):
        resolve({"model_path": NEMOTRON, "mamba_scheduler_strategy": "extra_buffer"}, "0.5.9", env={})
    with pytest.raises(SimStartupError, match="not compatible with --disable-radix-cache"):
        resolve(_args(mamba_scheduler_strategy="extra_buffer", disable_radix_cache=True), "0.5.12", env={})
    # 0.5.23: resolution is skipped with the radix cache off; the explicit value stays (inert)
    out = resolve(_args(mamba_radix_cache_strategy="extra_buffer", disable_radix_cache=True), "0.5.23", env={})
    assert out["mamba_radix_cache_strategy"] == "extra_buffer"
    assert out["uses_mamba_radix_cache"] is False


def test_spec_v2_env_only_warns_from_0_5_14() -> None:
    out = resolve(_args(), "0.5.19", env={"SGLANG_ENABLE_SPEC_V2": "1"})
    assert any("has been removed" in w for w in out["_warnings"])
    assert "_warnings" not in resolve(_args(), "0.5.23", env={"SGLANG_ENABLE_SPEC_V2": "1"})


def test_dense_model_has_no_mamba_adjustments() -> None:
    out = resolve({"model_path": DENSE}, "0.5.9", env={})
    assert out["disable_overlap_schedule"] is False
    assert out["disable_radix_cache"] is False


def test_from_argv_round_trip_and_rejection() -> None:
    config = SimConfig.from_argv(["--model-path", DENSE, "--max-running-requests", "4", "--fail-500", "0.1"])
    assert (config.model_path, config.max_running_requests, config.p_500) == (DENSE, 4, 0.1)
    with pytest.raises(SimStartupError, match="unrecognized arguments"):
        SimConfig.from_argv(["--mamba-scheduler-strategy", "extra_buffer"])
    config = SimConfig.from_argv(["--sim-version", "0.5.19", "--mamba-scheduler-strategy", "extra_buffer"])
    assert config.version == "0.5.19"


def test_from_argv_reads_the_stall_trickle_and_down_knobs() -> None:
    argv = ["--fail-stall", "0.25", "--trickle-s", "0.5", "--down-after", "3", "--down-for", "2"]
    config = SimConfig.from_argv(argv)
    assert (config.p_stall, config.trickle_s, config.down_after, config.down_for_s) == (0.25, 0.5, 3, 2.0)
    assert SimConfig.from_argv([]).down_for_s == 5.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--help"], "unrecognized arguments: --help"),
        (["--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
        (
            ["--sim-version", "0.5.10", "--speculative-algorithm", "MEDUSA"],
            "argument --speculative-algorithm: invalid choice: 'MEDUSA'",
        ),
        (["--sim-version", "0.5.9", "--enable-hisparse"], "unrecognized arguments: --enable-hisparse"),
        (["--cuda-graph-max-bs", "8"], "unrecognized arguments: --cuda-graph-max-bs"),
        (["--fail-stall", "1.5"], r"argument --fail-stall: probability must be in \[0, 1\], got 1.5"),
        (["--trickle-s", "-1"], "argument --trickle-s: seconds must be at least 0, got -1"),
        (["--fail-500", "0.6", "--fail-hang", "0.6"], "the --fail-\\* probabilities must sum to at most 1, got 1.2"),
        (["--max-running-requests"], "argument --max-running-requests: expected one argument"),
    ],
    ids=[
        "unknown",
        "help",
        "bad-int",
        "bad-choice-0.5.10",
        "newer-flag-on-0.5.9",
        "removed-flag-on-0.5.23",
        "probability",
        "negative-seconds",
        "fault-sum",
        "missing-value",
    ],
)
def test_from_argv_raises_instead_of_exiting(argv: list[str], message: str) -> None:
    # preflight and `url = "sim"` endpoints call this in-process: a SystemExit would end the whole run
    with pytest.raises(SimStartupError, match=message) as info:
        SimConfig.from_argv(argv)
    assert info.value.kind == "argparse" and info.value.exit_code == 2
