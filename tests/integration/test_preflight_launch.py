"""`launch()` end to end: the simulator started as a real process with SGLang's flags, waited for, preflighted.

The configurations are the story behind issue 6: `extra_buffer` asked for, `no_buffer` served.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import config_from_dict
from pipeline.errors import EndpointError, PreflightError
from pipeline.server.launch import format_launch, launch, stop

ROOT = Path(__file__).resolve().parents[2]
MODEL = "Qwen3.6-27B"
BASE = {"model-path": "Qwen/Qwen3.6-27B", "served-model-name": MODEL, "reasoning-parser": "qwen3"}
EXPECT = {"speculative_algorithm": "EAGLE", "mamba_scheduler_strategy": "extra_buffer", "reasoning_parser": "qwen3"}


def _cfg(tmp_path: Path, args: dict[str, Any], version: str, expect: dict[str, Any] | None = None) -> Any:
    return config_from_dict(
        {
            "generation": {"model": MODEL},
            "endpoints": [{"url": "http://127.0.0.1:0", "concurrency": 16}],
            "expect": EXPECT if expect is None else expect,
            "launch": {
                "command": [sys.executable, "-m", "pipeline.sim"],
                "env": {"PYTHONPATH": str(ROOT)},
                "args": {**args, "sim-version": version},
                "port": 0,
                "sglang_version": version,
                "log_file": str(tmp_path / "server.log"),
                "ready_timeout_s": 20,
            },
        }
    )


def _launch(cfg: Any, tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await launch(cfg, script=tmp_path / "launch.sh", **kwargs)

    result = asyncio.run(main())
    if result.get("pid"):
        assert stop(result["pid"]) is not None  # reaped: the server was ours and it is gone
    return result


def _checks(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["preflight"]["endpoints"][0]["checks"]}


def test_drifted_server_is_caught(tmp_path: Path) -> None:
    args = {**BASE, "mamba-scheduler-strategy": "auto", "disable-radix-cache": False}
    cfg = _cfg(tmp_path, args, "0.5.12", {"mamba_scheduler_strategy": "extra_buffer", "reasoning_parser": "qwen3"})
    result = _launch(cfg, tmp_path)
    assert not result["ok"] and result["pid"]
    assert any("auto resolves to no_buffer" in p["problem"] for p in result["static"])  # warned before it started
    check = _checks(result)["mamba_scheduler_strategy"]
    assert (check["key"], check["expected"], check["actual"], check["ok"]) == (
        "mamba_scheduler_strategy", "extra_buffer", "no_buffer", False,
    )  # fmt: skip
    assert "SGLang 0.5.12 resolves auto (the default) to no_buffer" in check["hint"]
    launched = _checks(result)["--mamba-scheduler-strategy"]
    assert launched["ok"] and launched["hint"] == "SGLang resolved auto to no_buffer"


def test_launched_arg_changed_by_sglang_is_reported(tmp_path: Path) -> None:
    args = {**BASE, "speculative-algorithm": "EAGLE", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 6, "mamba-radix-cache-strategy": "extra_buffer"}  # fmt: skip
    result = _launch(_cfg(tmp_path, args, "0.5.23"), tmp_path)
    check = _checks(result)["--speculative-num-draft-tokens"]
    assert not check["ok"] and check["actual"] == 4
    assert check["hint"].startswith("you passed --speculative-num-draft-tokens=6, the server runs ")
    assert "steps + 1" in check["hint"]


def test_old_flag_on_0523_fails_before_anything_starts(tmp_path: Path) -> None:
    args = {**BASE, "speculative-algorithm": "EAGLE", "mamba-scheduler-strategy": "extra_buffer"}
    cfg = _cfg(tmp_path, args, "0.5.23")
    with pytest.raises(PreflightError, match="0.5.23 rejects --mamba-scheduler-strategy") as err:
        _launch(cfg, tmp_path)
    assert "use --mamba-radix-cache-strategy" in str(err.value)
    assert not (tmp_path / "server.log").exists()  # nothing was started
    assert "# FATAL: SGLang 0.5.23 rejects" in (tmp_path / "launch.sh").read_text()


def test_old_flag_launched_anyway_reports_the_argparse_error(tmp_path: Path) -> None:
    args = {**BASE, "speculative-algorithm": "EAGLE", "mamba-scheduler-strategy": "extra_buffer"}
    with pytest.raises(EndpointError, match="exit code 2") as err:
        _launch(_cfg(tmp_path, args, "0.5.23"), tmp_path, check=False)
    message = str(err.value)
    assert "unrecognized arguments: --mamba-scheduler-strategy extra_buffer" in message.splitlines()[0]
    assert "last lines of" in message


def test_correct_configuration_passes(tmp_path: Path) -> None:
    args = {**BASE, "speculative-algorithm": "EAGLE", "mamba-radix-cache-strategy": "extra_buffer",
            "max-running-requests": 16, "slow-start": 0.5, "warmup": 0.3}  # fmt: skip
    result = _launch(_cfg(tmp_path, args, "0.5.23"), tmp_path)
    report = result["preflight"]["endpoints"][0]
    assert result["ok"], report["checks"]
    assert result["ready_s"] >= 0.5  # waited through the closed port and the 503 warmup
    checks = _checks(result)
    assert checks["mamba_scheduler_strategy"]["key"] == "mamba_radix_cache_strategy"
    assert report["info"]["probe_rid"].startswith("regen-probe-")
    assert report["info"]["speculative_decoding"] and report["info"]["effective_max_running_requests"] == 16
    assert result["argv"][:3] == [sys.executable, "-m", "pipeline.sim"]
    assert os.access(tmp_path / "launch.sh", os.X_OK)


def test_dry_run_starts_nothing(tmp_path: Path) -> None:
    args = {**BASE, "mamba-scheduler-strategy": "extra_buffer"}
    result = _launch(_cfg(tmp_path, args, "0.5.23"), tmp_path, dry_run=True)
    assert result["pid"] is None and result["preflight"] is None and not result["ok"]
    assert result["argv"][-2:] == ["--port", "0"]
    assert (tmp_path / "launch.sh").exists() and not (tmp_path / "server.log").exists()  # --script given: written


def test_a_dry_run_without_script_writes_nothing_and_prints_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "launch.sh").write_text("#!/bin/sh\n# the user's own script\n")
    result = asyncio.run(launch(_cfg(tmp_path, BASE, "0.5.23"), dry_run=True))
    assert (tmp_path / "launch.sh").read_text() == "#!/bin/sh\n# the user's own script\n"  # not overwritten
    assert result["script"] is None and result["pid"] is None
    shown = format_launch(result)
    assert "not written by a dry run" in shown and "exec " in shown and result["script_text"].strip() in shown
