"""The first hour of a real job (issue 28): a new user's config against real datasets and real simulators.

The real CLI as a subprocess, the simulator over HTTP on 127.0.0.1, the public datasets in ../shared/datasets/
(read where they are, never copied).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson

from tests.helpers import SIM_FLAGS, write_config, write_prompts
from tests.helpers.paths import ROOT, SHARED, needs_shared
from tests.helpers.processes import regen

DATASETS = SHARED / "datasets"
pytestmark = needs_shared("datasets")
SHAREGPT = DATASETS / "fastchat_dummy_conversation.json"
SEED_CONFIG = ROOT / "configs" / "qwen36-27b-mtp.toml"


def test_the_seed_config_on_a_sharegpt_file_stops_before_sending_anything(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    out = tmp_path / "run"
    result = regen("run", str(SEED_CONFIG), "--input", str(SHAREGPT), "--output", str(out), "--endpoint",
                   server.url, "--no-progress")  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "500 of the first 500 rows cannot be read (bad_input); nothing was sent" in result.stderr
    assert 'fix: input.messages_field = "auto"' in result.stderr and "conversations (ShareGPT)" in result.stderr
    assert "regen init" not in result.stderr  # the fix is a key (issue 38): init may be what wrote the config
    assert server.stats()["requests"] == 0  # not even a preflight probe
    assert not out.exists()  # nothing written


def _mixed(path: Path, good: int, bad: int) -> None:
    with open(path, "wb") as fh:
        for i in range(good + bad):
            row = {"id": f"r{i}", "prompt": f"What is {i} + 1?"} if i < good else {"id": f"r{i}", "text": "?"}
            fh.write(orjson.dumps(row) + b"\n")


def test_a_run_in_which_every_row_is_refused_never_exits_0(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    _mixed(tmp_path / "prompts.jsonl", good=0, bad=20)
    result = regen("run", str(write_config(tmp_path, server.url)), "--no-progress", "--set", "input.max_bad_share=1")
    assert result.returncode == 2, result.stderr
    assert "every row was refused (bad_input)" in result.stderr
    assert "20 of 20 rows (100%) were refused as bad_input" in result.stderr


def test_a_large_refused_share_is_a_warning_in_the_summary(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    _mixed(tmp_path / "prompts.jsonl", good=14, bad=6)
    result = regen("run", str(write_config(tmp_path, server.url)), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "warning: 6 of 20 rows (30%) were refused as bad_input and never sent" in result.stderr


def _until(check, timeout: float = 60.0):
    """Poll `check()` until it returns something truthy (the state the test waits for), or fail."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, "timed out waiting for the run's state"
        time.sleep(0.05)
    return got


def test_status_after_a_sigkill_says_no_live_worker(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS, "--decode-rate", "300")  # 16 requests share 300 tok/s: each stays in flight ~16 s
    write_prompts(tmp_path / "prompts.jsonl")
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, server.url)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        live = _until(lambda: (s := _status(run_dir)) and s["live_workers"] == 1 and _inflight(s) and s)
        (worker,) = live["workers"]
        assert worker["pid"] == proc.pid and worker["host"] == socket.gethostname() and worker["live"]
        assert worker["heartbeat_age_s"] < 5
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    status = regen("status", str(run_dir), "--json")
    assert status.returncode == 0, status.stderr
    dead = orjson.loads(status.stdout)
    assert dead["live_workers"] == 0 and dead["eta_s"] is None
    assert dead["workers"][0]["state"] == f"process {proc.pid} is gone" and not dead["workers"][0]["live"]
    assert _inflight(dead) == 0 and dead["rates"]["recent_completions_per_s"] == 0
    text = regen("status", str(run_dir)).stdout
    assert "no live worker: the run is not running" in text and "ETA unknown" in text


def _status(run_dir: Path) -> dict | None:
    from pipeline.inspection import run_status

    return run_status(run_dir) if (run_dir / "run.json").exists() else None


def _inflight(status: dict) -> int:
    return sum(ep.get("inflight") or 0 for ep in status["endpoints"].values())


def test_a_run_against_a_closed_port_says_connection_refused_and_when_it_gives_up(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed once the block ends
    _mixed(tmp_path / "prompts.jsonl", good=5, bad=0)
    cfg = write_config(tmp_path, url)
    result = regen("run", str(cfg), "--no-progress", "--set", "client.no_endpoint_timeout_s=3",
                   "--set", "output.progress_interval_s=0.5")  # fmt: skip
    assert result.returncode == 3, result.stderr
    down = next(line for line in result.stderr.splitlines() if f"{url}: down (" in line)
    assert "connection refused" in down and "the run gives up at " in down and " UTC (no_endpoint_timeout_s 3)" in down
    progress = [line for line in result.stderr.splitlines() if " regen.progress: " in line]
    assert progress and "no endpoint usable" in progress[-1] and "connection refused" in progress[-1]
    assert "giving up at " in progress[-1]


def test_inspect_shows_the_whole_regenerated_conversation_of_a_multi_turn_row(tmp_path: Path, sim) -> None:
    server = sim(*SIM_FLAGS)
    rows = [{"id": f"c{i}", "messages": [{"role": "user", "content": f"First question {i}?"},
                                         {"role": "assistant", "content": ""},
                                         {"role": "user", "content": f"And the follow-up {i}?"},
                                         {"role": "assistant", "content": ""}]} for i in range(6)]  # fmt: skip
    (tmp_path / "prompts.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert regen("run", str(write_config(tmp_path, server.url)), "--no-progress").returncode == 0
    run_dir, html = str(tmp_path / "run"), tmp_path / "report.html"
    report = orjson.loads(regen("inspect", run_dir, "--sample", "3", "--json").stdout)
    conv = report["sample"][0]["conversation"]
    assert [m["role"] for m in conv] == ["user", "assistant", "user", "assistant"]
    assert all(m["generated"] and m["reasoning"] and m["content"] for m in conv if m["role"] == "assistant")
    assert conv[0]["content"].startswith("First question") and conv[2]["content"].startswith("And the follow-up")
    text = regen("inspect", run_dir, "--sample", "1").stdout
    assert "[1] user" in text and "[2] assistant (regenerated)" in text and "[3] user" in text
    result = regen("inspect", run_dir, "--sample", "1", "--html", str(html))
    assert result.returncode == 0 and result.stdout == f"wrote {html} (6 rows, 1 samples)\n"  # not the text again
    page = html.read_text()
    assert "[2] assistant (regenerated)" in page and "First question" in page and "follow-up" in page


def test_a_repair_of_a_mostly_good_dataset_is_not_refused_for_its_few_unreadable_rows(tmp_path: Path, sim) -> None:
    """select = "invalid" sends 1 broken row and refuses 4 unreadable ones: 4 of 5 sent rows, but 4 of 20 rows."""
    server = sim(*SIM_FLAGS)

    def row(i: int, answer: str) -> dict:
        turn = {"role": "assistant", "content": answer, "reasoning_content": "Some careful reasoning first."}
        return {"id": f"r{i}", "messages": [{"role": "user", "content": f"Question {i}?"}, turn]}

    rows = [row(i, "A fine answer.") for i in range(15)] + [row(15, "")] + [{"id": f"u{i}", "t": "?"} for i in range(4)]
    (tmp_path / "prompts.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    result = regen("run", str(write_config(tmp_path, server.url)), "--no-progress", "--set", 'input.select="invalid"')
    assert result.returncode == 0, result.stderr
    assert "(1 accepted, 4 rejected;" in result.stderr
