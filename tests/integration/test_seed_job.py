"""The seed's job at CI size (issue 40): 20,000 seed-shaped rows (ShareGPT, every `gpt` turn empty, 5% two rounds, 10%
with a system turn) through the real CLI against an instant simulator, a SIGKILL at 35% and a rerun, then what a user
does next, each command a subprocess. It is the smoke test of the streaming paths that `scripts/bench.py --only
scale` measures at 90K and 902K rows: it asserts behaviour (every row present once, the original's order kept, the
repaired file what the in-memory implementation wrote), never time or memory."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from pipeline.store.synthetic import seed_dataset
from tests.helpers import assert_exactly_once
from tests.helpers.exactly_once import committed_ids
from tests.helpers.paths import ROOT
from tests.helpers.processes import SimProcess, regen

ROWS = 20_000
# sha256 of the repaired file this job writes. It was written by the repaired export as it was before it streamed
# (commit 6c08d25^, which held every accepted turn in memory), run over this test's run directory:
#   git worktree add /tmp/old 6c08d25^ && PYTHONPATH=/tmp/old python -m pipeline export RUN --format repaired ...
# The streaming export must write the same bytes. The simulator's text is a function of the request (its seed and
# messages), so the file does not depend on where the kill fell.
REPAIRED_SHA256 = "7440346d4ccb138cd255887332c2a0e83f6eb255c00cbfbf6d83f4a7aefcb655"


def _done_share(metrics: Path) -> float:
    try:
        last = orjson.loads(metrics.read_bytes().splitlines()[-1])
    except (OSError, IndexError, orjson.JSONDecodeError):
        return 0.0
    return last["done"] / last["total"]


def _exported_ids(data: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(data.iterdir()):
        if path.suffix == ".parquet":
            out += pq.read_table(path, columns=["id"]).column("id").to_pylist()
        else:
            out += [orjson.loads(line)["id"] for line in path.read_bytes().splitlines()]
    return out


def _ok(*args: str, codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    done = regen(*args, timeout=600)
    assert done.returncode in codes, f"regen {' '.join(args[:2])}: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr
    return done


@pytest.mark.timeout(900)  # ~1 min alone on 2 cores; several under a loaded machine
def test_the_seed_job_at_ci_size_keeps_every_row_once_in_order(tmp_path: Path, sim: Callable[..., SimProcess]) -> None:
    dataset = tmp_path / "seed20k.jsonl"
    seed_dataset(dataset, ROWS)
    ids = [orjson.loads(line)["id"] for line in dataset.read_bytes().splitlines()]
    server = sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "40")
    run = tmp_path / "run"
    cfg = tmp_path / "seed.toml"
    cfg.write_text(
        f'[input]\npath = "{dataset}"\n[output]\ndir = "{run}"\nshard_rows = 2000\n'
        f'[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 4096\n'
        f'[[endpoints]]\nurl = "{server.url}"\nconcurrency = 64\n'
    )

    # A SIGKILL once the run's own metrics say 35% is done, then the same command again.
    argv = [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress"]
    first = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while _done_share(run / "metrics" / "worker-0.jsonl") < 0.35 and first.poll() is None:
            assert time.monotonic() < deadline, "the run did not reach 35% in 10 minutes"
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL, "the run ended before the kill: nothing was resumed"
    assert len(committed_ids(run, "shards")) < ROWS
    _ok("run", str(cfg), "--no-progress")
    assert_exactly_once(run, ids)
    # The simulator took the kill as SGLang does, quietly: no traceback for a client gone before the headers.
    server.proc.kill()
    server.proc.wait(timeout=30)
    assert server.proc.stderr is not None and "Traceback" not in server.proc.stderr.read()
    accepted = len(committed_ids(run, "shards"))

    status = json.loads(_ok("status", str(run), "--json").stdout)
    assert (status["done"], status["total"]) == (ROWS, ROWS)
    report = json.loads(_ok("inspect", str(run), "--json").stdout)
    assert (report["rows"], report["accepted"]) == (ROWS, accepted)
    _ok("inspect", str(run), "--html", str(tmp_path / "report.html"))
    assert (tmp_path / "report.html").stat().st_size > 0
    _ok("validate", str(run))
    audit = json.loads(_ok("audit", str(dataset), "--json", codes=(0, 1)).stdout)
    assert audit["rows"] == ROWS

    for fmt in ("chat", "specforge"):
        _ok("export", str(run), "--format", fmt, "--out", str(tmp_path / fmt))
        assert sorted(_exported_ids(tmp_path / fmt / "data")) == sorted(committed_ids(run, "shards"))

    # The repaired export walks the original in its order and reads the run's turns on demand: every row, in order,
    # each with its own answers, and the very bytes the in-memory export wrote.
    _ok("export", str(run), "--format", "repaired", "--original", str(dataset), "--out", str(tmp_path / "repaired"))
    repaired = (tmp_path / "repaired" / dataset.name).read_bytes()
    rows = [orjson.loads(line) for line in repaired.splitlines()]
    assert [r["id"] for r in rows] == ids
    shards = {r["id"]: r for r in pq.ParquetDataset(sorted((run / "shards").glob("*.parquet"))).read().to_pylist()}
    for row in rows[:: ROWS // 50]:  # ShareGPT keeps the reasoning inline: <think>reasoning</think> then the answer
        answers = [t["value"] for t in row["conversations"] if t["from"] == "gpt"]
        turns = shards[row["id"]]["turns"]
        assert answers == [f"<think>\n{t['reasoning']}\n</think>\n\n{t['answer']}" for t in turns]
    assert hashlib.sha256(repaired).hexdigest() == REPAIRED_SHA256

    _ok("merge", str(run), "--target-rows", "100000")
    assert len(list((run / "shards").glob("*.parquet"))) == 1
    assert_exactly_once(run, ids)
