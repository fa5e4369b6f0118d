"""Mistakes a user makes in a config, an argument or an input file: found at once (exit 2, naming the key or file),
before anything is written or any endpoint is waited for; an empty input file is a warning, not an error."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path

import orjson
import pytest

from pipeline.cli import main
from pipeline.config import load_config
from tests.helpers.processes import regen


@pytest.fixture(autouse=True)
def _import_hooks_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """`regen run` in this process blocks pandas imports (engine/memory.py); later tests here and elsewhere need it."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))


def write_input(path: Path, rows: int = 3) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"id": f"p{i}", "prompt": f"question {i}"}) + b"\n" for i in range(rows)))
    return path


def write_config(
    tmp_path: Path, endpoint: str = 'url = "sim"', generation: str = "", rows: int = 3, give_up_s: float = 2
) -> Path:
    write_input(tmp_path / "in.jsonl", rows)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[input]\npath = "{tmp_path / "in.jsonl"}"\n'
        f'[output]\ndir = "{tmp_path / "run"}"\nsync_interval_s = 0.1\n'
        f"[generation]\nmax_tokens = 64\n{generation}\n"
        f"[client]\nno_endpoint_timeout_s = {give_up_s}\nbackoff_max_s = 0.1\n"  # gives up after 2 s, not 600
        f"[[endpoints]]\n{endpoint}\n"
    )
    return cfg


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    code = main(argv)
    return code, capsys.readouterr().err, time.monotonic() - start


# ---------------------------------------------------------------- endpoint URLs


def test_url_without_scheme_exits_2_at_once_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, 'url = "127.0.0.1:30000"', give_up_s=30)
    code, err, took = run_cli(["run", str(cfg), "--no-progress"], capsys)
    assert code == 2, err
    assert "endpoints[0].url" in err and "'127.0.0.1:30000'" in err and "http://127.0.0.1:30000" in err
    assert took < 15 and not (tmp_path / "run").exists()  # at once: a URL tried as an endpoint gives up after 30 s


@pytest.mark.parametrize("command", ["run", "preflight"])
def test_endpoint_flag_without_scheme_exits_2(tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, give_up_s=30)
    extra = ["--no-progress"] if command == "run" else ["--no-probe"]
    code, err, took = run_cli([command, str(cfg), "--endpoint", "localhost:30000", *extra], capsys)
    assert code == 2, err
    assert "--endpoint" in err and "'localhost:30000'" in err
    assert took < 15 and not (tmp_path / "run").exists()  # at once: a URL tried as an endpoint gives up after 30 s


def test_sim_and_http_urls_stay_valid(tmp_path: Path) -> None:
    for url in ("sim", "http://127.0.0.1:30000", "https://gpu-node-7.cluster:443/", "http://[::1]:30000"):
        assert load_config(write_config(tmp_path, f'url = "{url}"')).endpoints[0].url == url


def test_endpoints_file_urls_are_checked(tmp_path: Path) -> None:
    from pipeline.config import read_endpoints_file
    from pipeline.errors import ConfigError

    listed = tmp_path / "eps.txt"
    listed.write_text("http://a:1\n10.0.0.2:30000 8\n")
    with pytest.raises(ConfigError, match=r"eps.txt:2: '10.0.0.2:30000' is not"):
        read_endpoints_file(listed)


# ---------------------------------------------------------------- API keys


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_api_key_env_naming_an_unset_variable_exits_2(
    tmp_path: Path, value: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if value is None:
        monkeypatch.delenv("REGEN_TEST_KEY", raising=False)
    else:
        monkeypatch.setenv("REGEN_TEST_KEY", value)
    cfg = write_config(tmp_path, 'url = "sim"\napi_key_env = "REGEN_TEST_KEY"')
    for argv in (["run", str(cfg), "--no-progress"], ["preflight", str(cfg), "--no-probe"]):
        code, err, _ = run_cli(argv, capsys)
        assert code == 2, err
        assert "endpoints[0].api_key_env" in err and "$REGEN_TEST_KEY" in err
        assert ("is empty" if value == "" else "is not set") in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["sk-abc\r\nX-Injected: 1", "sk-abc\ndef", "sk-\x7fabc"], ids=["crlf", "lf", "del"])
def test_an_api_key_with_a_control_character_inside_exits_2_without_printing_it(
    tmp_path: Path, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REGEN_TEST_KEY", value)
    cfg = write_config(tmp_path, 'url = "sim"\napi_key_env = "REGEN_TEST_KEY"')
    for argv in (["run", str(cfg), "--no-progress"], ["preflight", str(cfg), "--no-probe"]):
        code, err, _ = run_cli(argv, capsys)
        assert code == 2, err
        assert "$REGEN_TEST_KEY" in err and "control character" in err
        assert "sk-" not in err and "abc" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://admin:hunter2@gpu-node-7:30000", "carries credentials"),
        ("http://gpu-node-7:30000/?api_key=hunter2", "query string"),
        ("http://gpu-node-7:30000/#frag", "query string or fragment"),
    ],
    ids=["userinfo", "query", "fragment"],
)
def test_a_url_with_credentials_or_a_query_exits_2_without_echoing_a_password(
    tmp_path: Path, url: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, f'url = "{url}"')
    code, err, _ = run_cli(["run", str(cfg), "--no-progress"], capsys)
    assert code == 2, err
    assert "endpoints[0].url" in err and message in err
    if "@" in url:
        assert "hunter2" not in err and "admin" not in err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("generation.top_p=7", "generation.top_p must be in (0, 1], got 7.0"),
        ("generation.temperature=-1", "generation.temperature must be 0 or more, got -1.0"),
        ("validate.max_repetition=5.0", "validate.max_repetition must be in [0, 1]"),
    ],
    ids=["top_p", "temperature", "max_repetition"],
)
def test_out_of_range_sampling_exits_2_and_writes_nothing(
    tmp_path: Path, override: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    code, err, _ = run_cli(["run", str(cfg), "--no-progress", "--set", override], capsys)
    assert code == 2, err
    assert message in err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- a missing RUN_DIR


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["inspect"],
        ["validate", "--json"],
        ["export", "--format", "chat", "--out", "OUT"],
        ["merge"],
    ],
    ids=["status", "status-json", "inspect", "validate", "export", "merge"],
)
def test_commands_on_a_missing_run_dir_exit_2(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "runs" / "typo"
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in argv]
    code = main([argv[0], str(missing), *argv[1:]])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"{missing}: no such run directory" in err and out == ""
    assert not missing.exists() and not (tmp_path / "out").exists()


def test_a_folder_that_is_not_a_run_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs").mkdir()
    assert main(["status", str(tmp_path / "runs")]) == 2
    assert "not a run directory" in capsys.readouterr().err


# ---------------------------------------------------------------- export --out


def _finished_run(tmp_path: Path) -> Path:
    from tests.helpers.inspection_runs import build_run

    return build_run(tmp_path)


def test_export_onto_an_existing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _finished_run(tmp_path)
    target = tmp_path / "export.jsonl"
    target.write_text("keep me\n")
    code = main(["export", str(run), "--format", "chat", "--out", str(target)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "an existing file" in err and "Traceback" not in err
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("inside", ["shards", ".", "exports/chat", "shards/nested"])
def test_export_into_the_run_dir_exits_2_and_writes_nothing(
    tmp_path: Path, inside: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _finished_run(tmp_path)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    code = main(["export", str(run), "--format", "chat", "--out", str(run / inside)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "inside the run directory" in err
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def test_export_into_another_run_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _finished_run(tmp_path / "a")
    other = _finished_run(tmp_path / "b")
    assert main(["export", str(run), "--format", "chat", "--out", str(other / "export")]) == 2
    assert f"inside the run directory {other.resolve()}" in capsys.readouterr().err
    assert not (other / "export").exists()


# ---------------------------------------------------------------- input files


def test_empty_input_file_warns_once_and_the_run_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """An input with no row at all is a mistake, not a run of 0 prompts that exits 0 (issue 38): exit 2, said once."""
    cfg = write_config(tmp_path)
    (tmp_path / "in.jsonl").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        code, err, _ = run_cli(["run", str(cfg), "--no-progress"], capsys)
    assert code == 2 and "the input holds no row: nothing to generate" in err, err
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings.count(f"{tmp_path / 'in.jsonl'}: input file has no rows") == 1, warnings


# ---------------------------------------------------------------- preflight and DNS


def test_preflight_failure_does_not_pin_the_config(tmp_path: Path) -> None:
    """A run stopped by preflight sent no prompt: the rerun with the fixed config is not refused as a change."""
    sim = 'url = "sim"\nsim_args = ["--served-model-name", "right-model", "--reasoning-parser", "qwen3"]'
    cfg = write_config(tmp_path, sim, generation='model = "wrong-model"')
    first = regen("run", str(cfg), "--no-progress")
    assert first.returncode == 3, first.stderr
    assert "preflight failed" in first.stderr
    cfg.write_text(cfg.read_text().replace("wrong-model", "right-model"))
    fixed = regen("run", str(cfg), "--no-progress")
    assert fixed.returncode == 0, fixed.stderr
    # once prompts were sent, a changed config is refused as before
    cfg.write_text(cfg.read_text().replace("max_tokens = 64", "max_tokens = 65"))
    changed = regen("run", str(cfg), "--no-progress")
    assert changed.returncode == 2 and "generation.max_tokens" in changed.stderr


def test_an_unresolvable_host_is_named_as_such() -> None:
    from pipeline.server.preflight import preflight_endpoint

    result = asyncio.run(preflight_endpoint("http://no-such-host.invalid:30000", load_config(None), probe=False))
    reach = result["checks"][0]
    assert reach["name"] == "reachable" and not reach["ok"]
    assert "cannot resolve host 'no-such-host.invalid'" in reach["actual"]
    assert "loading weights" not in reach["hint"]


# ---------------------------------------------------------------- a config that says nothing


@pytest.mark.parametrize("text", ["", "\n# only a comment\n"], ids=["empty", "comment"])
def test_an_empty_config_file_is_refused_before_anything_runs(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where the old default input, data/sample_prompts.jsonl, would be looked for
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sample_prompts.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    cfg = tmp_path / "empty.toml"
    cfg.write_text(text)
    code, err, _ = run_cli(["run", str(cfg), "--no-progress"], capsys)
    assert code == 2, err
    assert f"{cfg}: the config file sets nothing" in err and "regen init" in err
    assert not (tmp_path / "runs").exists()


def test_a_run_config_without_input_path_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    text = "\n".join(line for line in cfg.read_text().splitlines() if not line.startswith("path ="))
    cfg.write_text(text)
    code, err, _ = run_cli(["run", str(cfg), "--no-progress"], capsys)
    assert code == 2 and "input.path is not set; add `path = ...` under [input]" in err, err
    code, err, _ = run_cli(["run", str(cfg), "--no-progress", "--input", str(tmp_path / "in.jsonl")], capsys)
    assert code == 0, err  # --input is the path
