"""What an operator of a day-long run watches: progress lines in a redirected log, JSON logs, Prometheus metrics
scraped during the run, and the progress bar on a terminal. The real CLI against a slow simulator over HTTP."""

from __future__ import annotations

import fcntl
import itertools
import os
import pty
import re
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import SIM_FLAGS, write_config, write_prompts
from tests.helpers.exactly_once import committed_ids
from tests.helpers.paths import ROOT
from tests.helpers.processes import regen

# ~700 tokens a completion at 20,000 tok/s in all: ~30 completions/s, so 120 prompts take a few seconds.
SLOW = (*SIM_FLAGS, "--decode-rate", "20000")


def _popen(args: list[str], stderr: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", *args], stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_redirected_log_has_progress_lines_at_the_interval_and_no_carriage_return(tmp_path: Path, sim) -> None:
    server = sim(*SLOW)
    write_prompts(tmp_path / "prompts.jsonl")
    cfg = write_config(tmp_path, server.url)
    log = tmp_path / "regen.log"
    with open(log, "wb") as fh:
        proc = _popen(["run", str(cfg), "--set", "output.progress_interval_s=0.2"], fh)
        assert proc.wait(timeout=120) == 0, log.read_text()
    text = log.read_bytes()
    assert b"\r" not in text
    progress = [line for line in _lines(log) if " regen.progress: " in line]
    stamps = [datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00")) for line in progress]
    assert len(stamps) >= 5, text.decode()
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
    assert max(gaps) < 1.0, gaps  # every 0.2 s: 5x room for a busy machine (none at all would be the whole run)
    line = progress[-1]
    assert re.search(r"\d+/120 prompts \(\d+\.\d%\) \| [\d.]+ completions/s, [\d,]+ output tok/s \| ETA ", line), line
    assert "rejects " in line and "endpoints healthy=1" in line


def test_json_log_lines_all_parse(tmp_path: Path, sim) -> None:
    server = sim(*SLOW, "--fail-503", "0.05", "--seed", "1")
    write_prompts(tmp_path / "prompts.jsonl", n=60, bad=True)
    cfg = write_config(tmp_path, server.url)
    result = regen("run", str(cfg), "--log-format", "json", "--set", "output.progress_interval_s=0.2")
    assert result.returncode == 0, result.stderr
    records = [orjson.loads(line) for line in result.stderr.splitlines()]  # every line, not some
    assert records and all(isinstance(r, dict) and {"ts", "level", "logger", "msg"} <= set(r) for r in records)
    events = {r.get("event") for r in records}
    assert {"start", "progress", "summary"} <= events
    progress = next(r for r in records if r.get("event") == "progress")
    assert {"done", "total", "completions_per_s", "output_tokens_per_s", "eta_s", "endpoints_by_state"} <= set(progress)
    summary = next(r for r in records if r.get("event") == "summary")
    assert summary["done"] == 63 and summary["rejected_by_reason"]["bad_input"] == 3

    # an error is one JSON object too
    bad = regen("run", str(cfg), "--log-format", "json", "--set", "generation.top_p=7")
    assert bad.returncode == 2
    assert [orjson.loads(line)["level"] for line in bad.stderr.splitlines()] == ["ERROR"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "worker"))
            out.setdefault(sample.name, {})[labels] = sample.value
    return out


def test_metrics_are_scraped_during_the_run_and_count_the_rows_written(tmp_path: Path, sim) -> None:
    server = sim(*SLOW)
    write_prompts(tmp_path / "prompts.jsonl", bad=True)
    cfg = write_config(tmp_path, server.url)
    port = _free_port()
    args = ["run", str(cfg), "--no-progress", "--metrics-port", str(port), "--set", "output.metrics_linger_s=20"]
    proc = _popen(args, subprocess.DEVNULL)
    during: list[dict] = []
    final = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and final is None:
            time.sleep(0.1)
            try:
                scraped = _scrape(port)
            except httpx.HTTPError:
                assert proc.poll() is None, "regen exited before its metrics could be scraped"
                continue
            if scraped.get("regen_run_finished", {}).get((), 0) == 1:
                final = scraped
            elif sum(scraped.get("regen_completions_total", {}).values()):
                during.append(scraped)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert during, "never scraped while the run was generating"
    mid = during[len(during) // 2]
    assert 0 < sum(mid["regen_prompts_pending"].values())
    assert mid["regen_endpoint_capacity"] == {(("endpoint", server.url),): 16}
    assert mid["regen_endpoint_state"][(("endpoint", server.url), ("state", "healthy"))] == 1
    assert final is not None
    rows = len(committed_ids(tmp_path / "run", "shards"))
    assert sum(final["regen_completions_total"].values()) == rows > 0
    assert list(final["regen_completions_total"]) == [(("endpoint", server.url),)]
    assert final["regen_rejects_total"][(("reason", "bad_input"),)] == 3
    assert sum(final["regen_output_tokens_total"].values()) > rows
    assert final["regen_commit_seconds_count"][()] >= 1
    assert final["regen_prompts_pending"][()] == 0


def _read_pty(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            return
        if not chunk:
            return
        into.extend(chunk)


def test_the_bar_on_a_terminal_opens_at_the_real_rate_and_ends_at_100(tmp_path: Path, sim) -> None:
    server = sim(*SLOW)
    write_prompts(tmp_path / "prompts.jsonl")
    cfg = write_config(tmp_path, server.url)
    assert regen("run", str(cfg), "--no-progress", "--limit", "60").returncode == 0
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a 160-column terminal
    out = bytearray()
    reader = threading.Thread(target=_read_pty, args=(master, out), daemon=True)
    reader.start()
    proc = _popen(["run", str(cfg)], slave)
    os.close(slave)
    assert proc.wait(timeout=120) == 0, out.decode(errors="replace")
    reader.join(timeout=10)
    os.close(master)
    frames = [f for f in out.decode(errors="replace").split("\r") if "prompt" in f]
    rates = [float(r) for f in frames for r in re.findall(r"([\d.]+)prompt/s", f)]
    assert rates and max(rates) < 2000, rates  # ~50/s; the resumed 60 must not read as done in no time
    bars = [f for f in frames if re.search(r"\d+/120 ", f)]
    assert "100%" in bars[-1] and "120/120" in bars[-1], bars[-1]
