"""Config keys whose effect no other test shows, each set both ways on a real run (the CLI against a simulator over
HTTP) or a real RUN_DIR: `input.messages_field`, `validate.reject_think_markers`, `client.max_failure_share`,
`endpoints.requests_per_second` and `output.metrics_host`. (`generation.history_reasoning` is in
test_conversations, beside the history it changes.)"""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pyarrow.parquet as pq
import pytest

from tests.helpers import SIM_FLAGS, assert_exactly_once, wait_until, write_config, write_prompts
from tests.helpers.inspection_runs import build_run, row, write
from tests.helpers.paths import ROOT
from tests.helpers.processes import SimProcess, regen


def _set(cfg: Path, section: str, line: str) -> None:
    cfg.write_text(cfg.read_text().replace(f"[{section}]\n", f"[{section}]\n{line}\n", 1))


def test_messages_field_names_the_conversation_column(tmp_path: Path, sim) -> None:
    server: SimProcess = sim(*SIM_FLAGS)
    dialogs = {f"d{i}": [{"role": "user", "content": f"Question {i} from the dialog column?"}] for i in range(12)}
    (tmp_path / "prompts.jsonl").write_bytes(
        b"".join(orjson.dumps({"id": i, "dialog": d}) + b"\n" for i, d in dialogs.items())
    )
    cfg = write_config(tmp_path, server.url)
    cfg.write_text(cfg.read_text().replace('keep_fields = ["topic"]', ""))
    refused = regen("run", str(cfg), "--no-progress")  # "auto" looks for messages / conversations only
    assert refused.returncode == 2, refused.stderr
    assert "input.messages_field" in refused.stderr and server.stats()["requests"] == 0
    _set(cfg, "input", 'messages_field = "dialog"')
    done = regen("run", str(cfg), "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = {r["id"]: r for p in (tmp_path / "run" / "shards").glob("*.parquet") for r in pq.read_table(p).to_pylist()}
    assert {i: r["messages"] for i, r in rows.items()} == dialogs


def test_reject_think_markers_false_keeps_rows_with_a_leftover_tag(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    rng = random.Random(1)
    tagged = [row(5000 + k, rng, answer=f"</think> the answer is {k}") for k in range(6)]
    write(run / "shards" / "w0-0009.parquet", tagged)
    on = json.loads(regen("validate", str(run), "--json").stdout)
    assert on["failed_by_reason"].get("think_marker") == 6
    off = regen("validate", str(run), "--json", "--set", "reject_think_markers=false")
    assert "think_marker" not in json.loads(off.stdout)["failed_by_reason"]


def test_max_failure_share_is_the_share_of_failed_requests_that_stops_the_run(tmp_path: Path, sim) -> None:
    """A server failing 30% of requests (503, drawn per prompt and attempt from its seed: the same every run):
    at the default share (0.9 of the window) the run retries through it; at 0.1 it stops (exit 3)."""
    flags = (*SIM_FLAGS, "--fail-503", "0.3", "--seed", "4")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=100)
    lenient: SimProcess = sim(*flags)
    cfg = write_config(tmp_path, lenient.url)
    _set(cfg, "client", "failure_window = 20")
    done = regen("run", str(cfg), "--no-progress", "--skip-preflight")
    assert done.returncode == 0, done.stderr
    assert_exactly_once(tmp_path / "run", ids)
    assert lenient.stats()["faults"]["503"] >= 20  # it did fail often

    strict: SimProcess = sim(*flags)
    cfg.write_text(cfg.read_text().replace(f'dir = "{tmp_path / "run"}"', f'dir = "{tmp_path / "strict"}"'))
    _set(cfg, "client", "max_failure_share = 0.1")
    stopped = regen("run", str(cfg), "--no-progress", "--skip-preflight", "--endpoint", strict.url)
    assert stopped.returncode == 3, stopped.stderr
    assert "of the last 20 requests failed" in stopped.stderr
    assert strict.stats()["requests"] < lenient.stats()["requests"]


def test_requests_per_second_spaces_the_requests(tmp_path: Path, sim) -> None:
    """30 instant prompts at 10 requests/s: the throttle lets 10 go in each second, so the last is sent 2 s or
    more after the first (unthrottled, all 30 go within a fraction of a second). A lower bound: load only adds."""
    server: SimProcess = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=30)
    cfg = write_config(tmp_path, server.url, extra="requests_per_second = 10")
    done = regen("run", str(cfg), "--no-progress", "--skip-preflight")
    assert done.returncode == 0, done.stderr
    assert_exactly_once(tmp_path / "run", ids)
    stats = httpx.get(f"{server.url}/_sim/stats", params={"log": "1"}, timeout=10).json()
    times = sorted(t for entries in stats["generation_log"].values() for _, t in entries)
    assert len(times) == 30 and stats["requests"] == 30
    assert times[-1] - times[0] >= 1.9, times


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_host_is_the_address_the_metrics_bind(tmp_path: Path, sim) -> None:
    server: SimProcess = sim(*SIM_FLAGS)
    write_prompts(tmp_path / "prompts.jsonl", n=10)
    port = _free_port()
    cfg = write_config(tmp_path, server.url)
    _set(cfg, "output", f'metrics_host = "127.0.0.2"\nmetrics_port = {port}\nmetrics_linger_s = 60')
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def finished() -> bool:
            try:
                text = httpx.get(f"http://127.0.0.2:{port}/metrics", timeout=5).text
            except httpx.HTTPError:
                return False
            return re.search(r"^regen_run_finished(\{[^}]*\})? 1(\.0)?$", text, re.M) is not None

        wait_until(finished, "the metrics on 127.0.0.2 to show the run finished", alive=proc)
        with pytest.raises(httpx.ConnectError):  # not on the default address
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
