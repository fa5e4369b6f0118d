"""Every startup refusal the simulator knows, checked against `regen launch --dry-run` (issue 19): the same launch
that makes `regen sim` refuse to start makes the dry run exit 1 with a fatal problem, before any GPU is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline import cli
from pipeline.sim import SimConfig, SimStartupError
from pipeline.sim.state import Sim

QWEN = {"model-path": "Qwen/Qwen3.6-27B"}
SPEC = {**QWEN, "speculative-algorithm": "EAGLE"}
NEMOTRON = {"model-path": "nvidia/Nemotron-H-8B"}
DENSE = {"model-path": "Qwen/Qwen3-8B"}
V2 = {"SGLANG_ENABLE_SPEC_V2": "1"}

# (launch args, SGLang version, env, the words of SGLang's refusal) — one row per SimStartupError site in pipeline/sim.
REFUSALS: list[tuple[dict[str, Any], str, dict[str, str], str]] = [
    ({**QWEN, "mamba-scheduler-strategy": "extra_buffer"}, "0.5.23", {}, "unrecognized arguments"),
    ({**QWEN, "mamba-radix-cache-strategy": "extra_buffer"}, "0.5.12", {}, "unrecognized arguments"),
    ({**QWEN, "mamba-scheduler-strategy": "extra_buffer_lazy"}, "0.5.12", {}, "invalid choice"),
    ({**DENSE, "enable-hisparse": True}, "0.5.9", {}, "unrecognized arguments: --enable-hisparse"),
    ({**DENSE, "speculative-algorithm": "DFLASH"}, "0.5.10", {}, "invalid choice: 'DFLASH'"),
    ({**DENSE, "speculative-algorithm": "MEDUSA"}, "0.5.23", {}, "Unknown speculative algorithm name: MEDUSA"),
    ({**NEMOTRON, "mamba-scheduler-strategy": "extra_buffer"}, "0.5.9", {}, "not supported for NemotronH"),
    ({**SPEC, "mamba-scheduler-strategy": "extra_buffer", "mamba-track-interval": 2, "speculative-num-draft-tokens": 4,
      "speculative-num-steps": 3, "speculative-eagle-topk": 1}, "0.5.12", {}, "must be greater than or equal"),
    ({**QWEN, "mamba-scheduler-strategy": "extra_buffer", "page-size": 64, "mamba-track-interval": 100}, "0.5.9", {},
     "must be divisible by page_size"),
    ({**QWEN, "mamba-scheduler-strategy": "extra_buffer", "disable-radix-cache": True}, "0.5.10", {},
     "not compatible with --disable-radix-cache"),
    (SPEC, "0.5.12", {}, "not compatible with radix cache"),
    ({**NEMOTRON, "mamba-radix-cache-strategy": "extra_buffer"}, "0.5.23", {}, "extra_buffer is not supported"),
    ({**SPEC, "mamba-radix-cache-strategy": "extra_buffer_lazy"}, "0.5.14", {}, "extra_buffer_lazy unsupported"),
    ({**QWEN, "mamba-radix-cache-strategy": "extra_buffer", "page-size": 64, "mamba-track-interval": 100}, "0.5.23",
     {}, "^$"),  # a bare assert: no message
    ({**QWEN, "mamba-radix-cache-strategy": "no_buffer"}, "0.5.14", {}, "no_buffer do not support overlap schedule"),
    ({**QWEN, "mamba-radix-cache-strategy": "no_buffer", "disable-overlap-schedule": True, "page-size": 64}, "0.5.19",
     {}, "no_buffer only supports page_size=1"),
    ({**QWEN, "mamba-radix-cache-strategy": "no_buffer", "disable-overlap-schedule": True,
      "attention-backend": "trtllm_mha"}, "0.5.23", {}, "trtllm_mha"),
    ({**SPEC, "mamba-scheduler-strategy": "extra_buffer", "speculative-eagle-topk": 2}, "0.5.9", V2,
     "Spec v2 currently only supports topk = 1"),
    ({**SPEC, "mamba-scheduler-strategy": "extra_buffer", "speculative-eagle-topk": 2}, "0.5.10", V2,
     "Spec v2 currently only supports topk = 1"),
]  # fmt: skip
IDS = [
    "old-flag-0.5.23", "new-flag-0.5.12", "lazy-0.5.12", "unknown-flag-0.5.9", "spec-choice-0.5.10",
    "spec-unknown-0.5.23", "extra-buffer-arch-0.5.9", "track-interval-draft-0.5.12", "track-interval-page-0.5.9",
    "extra-buffer-radix-off-0.5.10", "auto-spec-radix-0.5.12", "extra-buffer-arch-0.5.23", "lazy-spec-0.5.14",
    "track-interval-page-0.5.23", "no-buffer-overlap-0.5.14", "no-buffer-page-0.5.19", "no-buffer-trtllm-0.5.23",
    "topk-spec-v2-0.5.9", "topk-spec-v2-0.5.10",
]  # fmt: skip


def _argv(args: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name, value in args.items():
        out += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return out


def _config(tmp_path: Path, args: dict[str, Any], version: str, env: dict[str, str]) -> Path:
    table = ", ".join(f"{k} = {_toml(v)}" for k, v in args.items())
    envs = ", ".join(f'{k} = "{v}"' for k, v in env.items())
    path = tmp_path / "launch.toml"
    path.write_text(f'[launch]\nsglang_version = "{version}"\nargs = {{ {table} }}\nenv = {{ {envs} }}\n')
    return path


def _toml(value: Any) -> str:
    if value is True:
        return "true"
    return str(value) if isinstance(value, int) else f'"{value}"'


@pytest.mark.parametrize(("args", "version", "env", "words"), REFUSALS, ids=IDS)
def test_every_sim_refusal_is_refused_by_the_dry_run(
    args: dict[str, Any], version: str, env: dict[str, str], words: str, tmp_path: Path, capsys: Any
) -> None:
    with pytest.raises(SimStartupError, match=words):
        Sim(SimConfig.from_argv([*_argv(args), "--sim-version", version], env=env))  # parse, then resolve
    code = cli.main(
        ["launch", str(_config(tmp_path, args, version, env)), "--dry-run", "--script", str(tmp_path / "l.sh")]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FATAL" in out
    assert "# FATAL" in (tmp_path / "l.sh").read_text()


def test_the_motivating_command_on_0_5_9_topk_2_with_spec_v2_names_the_flag(tmp_path: Path, capsys: Any) -> None:
    args = {**SPEC, "mamba-scheduler-strategy": "extra_buffer", "speculative-eagle-topk": 2}
    code = cli.main(["launch", str(_config(tmp_path, args, "0.5.9", V2)), "--dry-run", "--script", str(tmp_path / "x")])
    out = capsys.readouterr().out
    assert code == 1
    assert "FATAL speculative-eagle-topk" in out and "Spec v2 currently only supports topk = 1" in out


@pytest.mark.parametrize(
    ("version", "mamba_flag", "env", "requests"),
    [
        ("0.5.9", "mamba-scheduler-strategy", {}, 6),
        ("0.5.10", "mamba-scheduler-strategy", V2, 4),
        ("0.5.14", "mamba-radix-cache-strategy", {}, 4),
        ("0.5.23", "mamba-radix-cache-strategy", {}, 4),
    ],
    ids=["0.5.9", "0.5.10", "0.5.14", "0.5.23"],
)
def test_dry_run_states_the_expected_capacity(
    version: str, mamba_flag: str, env: dict[str, str], requests: int, tmp_path: Path, capsys: Any
) -> None:
    args = {**SPEC, mamba_flag: "extra_buffer", "max-mamba-cache-size": 24, "mem-fraction-static": 0.92}
    args["trust-remote-code"] = True
    code = cli.main(
        ["launch", str(_config(tmp_path, args, version, env)), "--dry-run", "--script", str(tmp_path / "x")]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"expected capacity (SGLang {version}): at most {requests} requests at once" in out
    assert f"--max-mamba-cache-size 24 caps this server at {requests} running requests" in out
