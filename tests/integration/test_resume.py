"""Resume through the real CLI against real simulator subprocesses: config drift, retry-rejects, worker locks,
unwritable output, changing the worker count, appended input, a torn journal after a SIGKILL."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_config, write_prompts
from tests.helpers.exactly_once import committed_ids
from tests.helpers.paths import ROOT
from tests.helpers.processes import SimProcess, regen

Sim = Callable[..., SimProcess]


def _run(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return regen("run", str(cfg), "--no-progress", *args)


def _start(cfg: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _journaled(journal_dir: Path) -> list[str]:
    """The ids of the rows in the journal files of `journal_dir`."""
    lines = [line for j in journal_dir.glob("*.jsonl") for line in j.read_bytes().splitlines()]
    return [orjson.loads(line)["row"]["id"] for line in lines]


def _manifest(run_dir: Path) -> dict:
    return dict(orjson.loads((run_dir / "run.json").read_bytes()))


def test_config_drift_is_refused_then_allowed_and_recorded(tmp_path: Path, sim: Sim) -> None:
    server = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=20)
    cfg = write_config(tmp_path, server.url)
    assert _run(cfg).returncode == 0
    before = server.stats()["generations_total"]
    manifest = (tmp_path / "run" / "run.json").read_bytes()
    write_prompts(tmp_path / "prompts.jsonl", n=25)  # new work, so a refused run would have something to send

    drift = ("--set", "generation.temperature=0.3", "--set", "generation.max_tokens=2048")
    refused = _run(cfg, *drift)
    assert refused.returncode == 2, refused.stderr
    assert "generation.temperature: run has 0.6, config has 0.3" in refused.stderr
    assert "generation.max_tokens: run has 4096, config has 2048" in refused.stderr
    assert "--allow-config-change" in refused.stderr
    assert server.stats()["generations_total"] == before
    assert (tmp_path / "run" / "run.json").read_bytes() == manifest

    allowed = _run(cfg, *drift, "--allow-config-change")
    assert allowed.returncode == 0, allowed.stderr
    assert_exactly_once(tmp_path / "run", ids + [f"p{i:04d}" for i in range(20, 25)])
    run = _manifest(tmp_path / "run")
    changes = [h["config_change"] for h in run["history"] if "config_change" in h]
    assert len(changes) == 1
    assert {key for key, _, _ in changes[0]} == {"generation.temperature", "generation.max_tokens"}
    assert run["generation"]["generation"]["temperature"] == 0.3


def test_retry_rejects_moves_ids_from_rejects_to_shards(tmp_path: Path, sim: Sim) -> None:
    broken = sim(*SIM_FLAGS, "--fail-empty", "1.0")
    healthy = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=20)
    cfg = write_config(tmp_path, broken.url)
    first = _run(cfg, "--skip-preflight")
    assert first.returncode == 0, first.stderr
    assert sorted(committed_ids(tmp_path / "run", "rejects")) == ids

    assert _run(cfg, "--endpoint", healthy.url).returncode == 0  # rejects are final without the flag
    assert healthy.stats()["generations_total"] == 0

    retried = _run(cfg, "--endpoint", healthy.url, "--retry-rejects")
    assert retried.returncode == 0, retried.stderr
    good, bad = assert_exactly_once(tmp_path / "run", ids)
    assert (sorted(good), bad) == (ids, [])
    assert healthy.stats()["generations_total"] == len(ids)


def test_a_second_process_on_the_same_worker_index_exits_4(tmp_path: Path, sim: Sim) -> None:
    # 20 tokens/s across 16 slots: requests last minutes, so the first run is still running however long the
    # second takes to start on a busy machine (it is SIGKILLed below)
    server = sim(*SIM_FLAGS, "--decode-rate", "20", "--max-running-requests", "16")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=40)
    cfg = write_config(tmp_path, server.url)
    first = _start(cfg)
    try:
        _wait(lambda: server.stats()["in_flight"] > 0)
        second = _run(cfg)
        assert first.poll() is None, "the first run ended before the second was refused"
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    assert second.returncode == 4, second.stderr
    assert "worker 0 of" in second.stderr and "is already running" in second.stderr
    assert f"pid {first.pid}" in second.stderr and "--worker-index" in second.stderr
    assert "Traceback" not in second.stderr
    assert _run(cfg, "--endpoint", sim(*SIM_FLAGS).url).returncode == 0
    assert_exactly_once(tmp_path / "run", ids)


def test_output_dir_under_a_regular_file_is_a_clear_error(tmp_path: Path, sim: Sim) -> None:
    write_prompts(tmp_path / "prompts.jsonl", n=5)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("keep me")
    cfg = write_config(tmp_path, sim(*SIM_FLAGS).url)
    result = _run(cfg, "--output", str(blocker / "run"))
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr
    assert str(blocker) in result.stderr
    assert blocker.read_text() == "keep me"


def test_an_unwritable_run_dir_stops_cleanly_and_loses_nothing(tmp_path: Path, sim: Sim) -> None:
    server = sim(*SIM_FLAGS)
    write_prompts(tmp_path / "prompts.jsonl", n=30)
    cfg = write_config(tmp_path, server.url)
    assert _run(cfg).returncode == 0
    ids = write_prompts(tmp_path / "prompts.jsonl", n=40)
    journal = tmp_path / "run" / "journal"
    shutil.rmtree(journal)
    journal.write_text("")  # a file in the way: the store cannot create its journal (root ignores chmod)

    result = _run(cfg)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{journal}: a file is in the way" in result.stderr
    assert len(committed_ids(tmp_path / "run", "shards")) == 30  # every committed file still reads
    journal.unlink()
    assert _run(cfg).returncode == 0
    assert_exactly_once(tmp_path / "run", ids)
    assert server.stats()["generations_total"] == 40


@pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 3)], ids=["3-then-2", "2-then-3"])
def test_changing_the_worker_count_loses_and_duplicates_nothing(
    tmp_path: Path, sim: Sim, before: int, after: int
) -> None:
    server = sim(*SIM_FLAGS)
    ids = write_prompts(tmp_path / "prompts.jsonl", n=60)
    cfg = write_config(tmp_path, server.url)

    def round_of(workers: int, *extra: str) -> None:
        procs = [_start(cfg, "--worker-index", str(i), "--num-workers", str(workers), *extra) for i in range(workers)]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err

    round_of(before, "--limit", "7")
    partial = committed_ids(tmp_path / "run", "shards") + committed_ids(tmp_path / "run", "rejects")
    assert len(partial) == 7 * before
    round_of(after)
    assert_exactly_once(tmp_path / "run", ids)
    assert server.stats()["generations_total"] == len(ids)  # nothing committed was generated again


def test_prompts_appended_after_a_finished_run_are_picked_up(tmp_path: Path, sim: Sim) -> None:
    server = sim(*SIM_FLAGS)
    write_prompts(tmp_path / "prompts.jsonl", n=30)
    cfg = write_config(tmp_path, server.url)
    assert _run(cfg).returncode == 0
    ids = write_prompts(tmp_path / "prompts.jsonl", n=42)  # the same 30 rows, then 12 new ones
    assert _run(cfg).returncode == 0
    assert_exactly_once(tmp_path / "run", ids)
    assert server.stats()["generations_total"] == 42


def test_a_torn_journal_line_after_sigkill_is_ignored(tmp_path: Path, sim: Sim) -> None:
    slow = sim(*SIM_FLAGS, "--decode-rate", "6000", "--max-running-requests", "16")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=80)
    cfg = write_config(tmp_path, slow.url)
    journal_dir = tmp_path / "run" / "journal"

    def journaled() -> list[str]:
        return _journaled(journal_dir)

    proc = _start(cfg)
    try:
        _wait(lambda: journal_dir.is_dir() and len(journaled()) >= 5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    saved = journaled()
    journal = sorted(journal_dir.glob("*.jsonl"))[-1]
    with open(journal, "ab") as fh:
        fh.write(b'{"kind": "accepted", "row": {"id": "p00')  # a write cut short by the kill

    healthy = sim(*SIM_FLAGS)
    result = _run(cfg, "--endpoint", healthy.url)
    assert result.returncode == 0, result.stderr
    assert_exactly_once(tmp_path / "run", ids)
    regenerated = {rid.split("-")[1] for rid in healthy.stats()["generations_by_rid"]}
    assert regenerated.isdisjoint(saved)  # the journaled rows were recovered, not generated again
    assert list(journal_dir.iterdir()) == []


def test_a_row_group_of_waiting_rows_is_journaled_before_the_sync_interval(tmp_path: Path, sim: Sim) -> None:
    """With a sync interval longer than the run, rows still reach the journal as soon as a row group's worth
    waits (memory follows the row group, not the rate), and a SIGKILL then keeps them."""
    slow = sim(*SIM_FLAGS, "--decode-rate", "6000", "--max-running-requests", "16")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=80)
    cfg = write_config(tmp_path, slow.url)
    cfg.write_text(cfg.read_text().replace("sync_interval_s = 0.2", "sync_interval_s = 600\nrow_group_rows = 4"))
    journal_dir = tmp_path / "run" / "journal"

    def journaled() -> list[str]:
        return _journaled(journal_dir)

    proc = _start(cfg)
    try:
        _wait(lambda: journal_dir.is_dir() and len(journaled()) >= 8)
        assert slow.stats()["responses"] < 80  # journaled while the run was under way, not by its final close
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    saved = journaled()
    assert len(saved) >= 8

    healthy = sim(*SIM_FLAGS)
    result = _run(cfg, "--endpoint", healthy.url)
    assert result.returncode == 0, result.stderr
    assert_exactly_once(tmp_path / "run", ids)
    regenerated = {rid.split("-")[1] for rid in healthy.stats()["generations_by_rid"]}
    assert regenerated.isdisjoint(saved)
