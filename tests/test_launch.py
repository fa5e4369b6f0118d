"""launch.py without a server: the argv, the launch.sh round trip through bash, the static check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import config_from_dict
from pipeline.errors import ConfigError
from pipeline.server.launch import launch_argv, launch_expectations, launch_script, static_check, target_version
from pipeline.sglang.resolution import StartupRefused, resolve

DUMP_ARGV = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': os.environ.get('REGEN_T', '')}))"


def _cfg(args: dict[str, Any], **launch: Any) -> Any:
    return config_from_dict({"launch": {"args": args, **launch}})


def test_argv_maps_values_to_flags() -> None:
    cfg = _cfg(
        {
            "model-path": "Qwen/Qwen3.6-27B",
            "tp": 4,
            "mem-fraction-static": 0.85,
            "enable-metrics": True,
            "disable-radix-cache": False,
            "cuda-graph-bs": [1, 2, 4],
            "json-model-override-args": {"rope_scaling": {"factor": 2}},
        },
        command=["python3", "-m", "sglang.launch_server"],
        host="0.0.0.0",
        port=30001,
    )
    assert launch_argv(cfg) == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", "Qwen/Qwen3.6-27B",
        "--tp", "4",
        "--mem-fraction-static", "0.85",
        "--enable-metrics",
        "--cuda-graph-bs", "1", "2", "4",
        "--json-model-override-args", '{"rope_scaling":{"factor":2}}',
        "--host", "0.0.0.0", "--port", "30001",
    ]  # fmt: skip


def test_host_and_port_in_args_win_and_appear_once() -> None:
    argv = launch_argv(_cfg({"port": 31000, "host": "10.0.0.5"}, port=30000))
    assert argv[-4:] == ["--host", "10.0.0.5", "--port", "31000"]
    assert argv.count("--port") == 1


def test_expectations_are_every_launched_arg() -> None:
    cfg = _cfg({"speculative-algorithm": "EAGLE", "disable-radix-cache": False}, port=30002)
    assert launch_expectations(cfg) == {
        "speculative-algorithm": "EAGLE",
        "disable-radix-cache": False,
        "host": "127.0.0.1",
        "port": 30002,
    }


def test_launch_script_round_trips_through_bash(tmp_path: Path) -> None:
    nasty = [
        "two words",
        "it's",
        'say "hi"',
        "$HOME and ${PATH}",
        "`whoami` $(id)",
        "back\\slash",
        "semi;colon && echo pwned",
        "*.py",
        "line\nbreak",
        "",
    ]
    cfg = _cfg(
        {"served-model-name": nasty[0], "chat-template": nasty[1:]},
        command=[sys.executable, "-c", DUMP_ARGV],
        env={"REGEN_T": "a 'b' \"c\" $d"},
        port=1234,
    )
    script = tmp_path / "launch.sh"
    script.write_text(launch_script(cfg))
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True, timeout=30)
    dumped = json.loads(out.stdout)
    assert dumped["argv"] == launch_argv(cfg)[3:]
    assert dumped["argv"][:2] == ["--served-model-name", "two words"]
    assert dumped["argv"][3 : 3 + len(nasty) - 1] == nasty[1:]
    assert dumped["env"] == "a 'b' \"c\" $d"


def test_launch_script_log_redirect_and_warnings() -> None:
    cfg = _cfg({"mamba-scheduler-strategy": "extra_buffer"}, log_file="/var/log/sglang server.log")
    text = launch_script(cfg, static_check(cfg, "0.5.23"))
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "# FATAL: SGLang 0.5.23 rejects --mamba-scheduler-strategy" in text
    assert text.rstrip().endswith(">>'/var/log/sglang server.log' 2>&1")


def test_bad_env_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a valid environment variable name"):
        launch_script(_cfg({}, env={"BAD-NAME": "1"}))


def _problems(args: dict[str, Any], version: str | None, **launch: Any) -> list[dict[str, Any]]:
    return static_check(_cfg(args, **launch), version)


QWEN = {"model-path": "Qwen/Qwen3.6-27B"}
SPEC = {**QWEN, "speculative-algorithm": "EAGLE"}


@pytest.mark.parametrize(
    ("args", "version", "env", "key", "fatal", "words"),
    [
        ({**QWEN, "mamba-scheduler-strategy": "extra_buffer"}, "0.5.23", {}, "mamba-scheduler-strategy", True,
         "rejects --mamba-scheduler-strategy"),
        ({**QWEN, "mamba-scheduler-strategy": "extra_buffer"}, "0.5.19", {}, "mamba-scheduler-strategy", False,
         "deprecated alias"),
        ({**QWEN, "mamba-radix-cache-strategy": "extra_buffer"}, "0.5.12", {}, "mamba-radix-cache-strategy", True,
         "has no --mamba-radix-cache-strategy"),
        ({**SPEC, "mamba-scheduler-strategy": "extra_buffer"}, "0.5.10.post1", {}, "SGLANG_ENABLE_SPEC_V2", False,
         "needs SGLANG_ENABLE_SPEC_V2=1"),
        (SPEC, "0.5.12", {}, "mamba-scheduler-strategy", True, "refused on 0.5.10-0.5.12"),
        ({**QWEN, "mamba-radix-cache-strategy": "no_buffer"}, "0.5.14", {}, "mamba-radix-cache-strategy", True,
         "needs --disable-overlap-schedule"),
        ({**QWEN, "mamba-scheduler-strategy": "extra_buffer", "disable-radix-cache": True}, "0.5.12", {},
         "mamba-scheduler-strategy", True, "refused on 0.5.10-0.5.12"),
        (SPEC, "0.5.23", {"SGLANG_ENABLE_SPEC_V2": "1"}, "SGLANG_ENABLE_SPEC_V2", False, "no effect"),
        ({"model_path": "x"}, "0.5.23", {}, "model_path", True, "not an SGLang flag spelling"),
        ({**SPEC, "speculative-eagle-topk": 1, "speculative-num-steps": 3, "speculative-num-draft-tokens": 6},
         "0.5.23", {}, "speculative-num-draft-tokens", False, "changes it to 4"),
        ({**QWEN}, None, {}, "sglang_version", False, "unknown"),
    ],
    ids=[
        "old-flag-0.5.23", "old-flag-alias-0.5.19", "new-flag-0.5.12", "spec-v2-0.5.10", "auto-spec-radix-0.5.12",
        "no-buffer-overlap-0.5.14", "extra-buffer-radix-off-0.5.12", "spec-v2-ignored-0.5.23", "underscore-flag",
        "draft-tokens-adjusted", "unknown-version",
    ],
)  # fmt: skip
def test_static_check_known_bad(
    args: dict[str, Any], version: str | None, env: dict[str, str], key: str, fatal: bool, words: str
) -> None:
    problems = _problems(args, version, env=env)
    match = [p for p in problems if p["key"] == key and words in p["problem"]]
    assert match, problems
    assert match[0]["fatal"] is fatal
    assert match[0]["hint"]


@pytest.mark.parametrize(
    ("args", "version", "env"),
    [
        ({**SPEC, "mamba-radix-cache-strategy": "extra_buffer", "max-running-requests": 64}, "0.5.23", {}),
        ({**SPEC, "mamba-scheduler-strategy": "extra_buffer"}, "0.5.12", {}),
        ({**SPEC, "mamba-scheduler-strategy": "extra_buffer"}, "0.5.10", {"SGLANG_ENABLE_SPEC_V2": "1"}),
        ({**QWEN, "mamba-radix-cache-strategy": "no_buffer", "disable-overlap-schedule": True}, "0.5.14", {}),
    ],
    ids=["0.5.23", "0.5.12", "0.5.10-spec-v2", "0.5.14-no-buffer"],
)
def test_static_check_passes_good_launches(args: dict[str, Any], version: str, env: dict[str, str]) -> None:
    assert _problems(args, version, env=env) == []


def test_static_check_expectation_conflicts_and_48_cap() -> None:
    cfg = config_from_dict(
        {
            "endpoints": [{"url": "http://127.0.0.1:30000", "concurrency": 64}],
            "expect": {"mamba_scheduler_strategy": "extra_buffer", "reasoning_parser": "qwen3"},
            "launch": {"args": {**SPEC, "reasoning-parser": "deepseek-r1"}, "port": 30000},
        }
    )
    problems = {p["key"]: p for p in static_check(cfg, "0.5.23")}
    assert "passes 'deepseek-r1'" in problems["reasoning-parser"]["problem"]
    assert "at most 48" in problems["max-running-requests"]["problem"]
    assert not any(p["fatal"] for p in problems.values())


def test_target_version_prefers_config_then_sim_flag() -> None:
    assert target_version(_cfg({}, sglang_version="0.5.12")) == "0.5.12"
    sim = _cfg({"sim-version": "0.5.10"}, command=[sys.executable, "-m", "pipeline.sim"])
    assert target_version(sim) == "0.5.10"


# The dry run words the outcome of `pipeline.sglang.resolution` (the rules the simulator plays): it is fatal exactly
# when SGLang, as regen reproduces it, refuses to start.
AGREEMENT = [
    ({"model-path": model, **mamba, **radix, **spec}, version, env)
    for model in ("Qwen/Qwen3.6-27B", "nvidia/Nemotron-H-8B", "meta-llama/Llama-3.1-8B")
    for mamba in (
        {},
        {"mamba-scheduler-strategy": "extra_buffer"},
        {"mamba-radix-cache-strategy": "no_buffer"},
        {"mamba-radix-cache-strategy": "extra_buffer_lazy"},
    )
    for radix in ({}, {"disable-radix-cache": True})
    for spec in (
        {},
        {"speculative-algorithm": "EAGLE", "speculative-eagle-topk": 2},
        {"speculative-algorithm": "NGRAM"},
    )
    for version in ("0.5.9", "0.5.10", "0.5.12", "0.5.14", "0.5.23")
    for env in ({}, {"SGLANG_ENABLE_SPEC_V2": "1"})
]


AGREEMENT_IDS = [
    "-".join([version, *(f"{k}={v}" for k, v in {**args, **env}.items() if k != "model-path"), args["model-path"]])
    for args, version, env in AGREEMENT
]


@pytest.mark.parametrize(("args", "version", "env"), AGREEMENT, ids=AGREEMENT_IDS)
def test_the_dry_run_is_fatal_exactly_when_sglang_refuses(
    args: dict[str, Any], version: str, env: dict[str, str]
) -> None:
    problems = _problems(args, version, env=env)
    given = {k.replace("-", "_"): v for k, v in args.items()}
    try:
        resolve(given, version, env)
    except StartupRefused:
        refused = True
    else:
        refused = False
    assert any(p["fatal"] for p in problems) is refused, problems


def test_extra_buffer_without_radix_cache_is_inert_not_refused_from_0_5_14() -> None:
    args = {"model-path": "nvidia/Nemotron-H-8B", "mamba-radix-cache-strategy": "extra_buffer"}
    problems = _problems({**args, "disable-radix-cache": True}, "0.5.23", env={})
    assert [(p["problem"], p["fatal"]) for p in problems] == [
        ("extra_buffer is inert with --disable-radix-cache on ≥0.5.14", False)
    ]
