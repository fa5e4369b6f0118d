#!/usr/bin/env python3
"""Chaos test: run `regen run` against a simulator, kill it at random moments, resume, check exactly-once.

    python scripts/chaos.py --prompts 3000 --kills 12 --max-workers 3    # the long version
    python scripts/chaos.py --prompts 300 --kills 3 --max-workers 2 --json   # what the test suite runs

Each round starts `regen run` as subprocesses (1..--max-workers workers, the count changing between rounds) and
signals them at a random moment: mostly SIGKILL, sometimes SIGTERM/SIGINT (a clean drain). The moment is a random
number of completions into the round (so a kill lands mid-run whatever the speed), or now and then a random time
right after the start (a kill during open/recovery). Every other round uses tiny shards (`--small-shard-rows`),
so part commits and journal rotations are frequent, and those rounds are signalled the moment a new part file
appears (a commit has just renamed it; the journal rotation follows). After each kill the RUN_DIR is examined for
that window (a journal whose part is already committed: killed between the rename and the rotation). A final
run finishes the rest. Then: every input id must be in exactly one of shards/rejects, and every committed file
must read whole.

Two more faults of a two-day run, on request: `--damage N` truncates N committed shard parts between rounds (as a
bad disk or a half-copied file would; the next run must set each aside into RUN_DIR/damaged/ and regenerate its
rows), and `--hang P` makes the simulator hold a share P of requests forever while /health stays 200 (each must be
given up at its deadline, aborted and retried; the config scales `client.hang_floor_s` down to 1 s).

`--s3` runs the same against a bucket on a local S3 server (moto, from the dev extra): `output.dir` is
`s3://regen-chaos/run`, the workers write their node-local working copies and commit through the bucket's commit
log, and the final check reads a fresh copy pulled from the bucket, so a part that is uploaded but not committed
(half-visible) would show as a duplicate or an unexpected file.

Wasted work is measured, not inferred: the simulator counts every generation that ran to its end, and every final
row records the attempts it took, so `generations_total - sum(attempts)` is what the kills threw away. The bound it
is checked against, per kill, is the requests in flight (`concurrency` per worker) plus `sync_interval_s` of
completions at the rate measured during the rounds, plus the rows of damaged parts (generated again by design).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
HANG_REQUEST_TIMEOUT_S = 900  # with --hang: a run that waited request_timeout_s for a hang would take this long
CONCURRENCY = 32
SIM_FLAGS = ["--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "400"]
_JOURNAL = re.compile(r"^worker-(\d+)\.(\d+)\.jsonl$")


@dataclass
class Round:
    workers: int
    signal: str
    shard_rows: int
    early: bool  # signalled during startup, before waiting for completions
    aim_commit: bool  # after the target, signalled the moment a new part file appears (a commit in progress)
    landed: bool = False  # some process was still running when signalled
    generated: int = 0  # completions the simulator finished during the round
    seconds: float = 0.0  # from the round's first completion to the signal
    in_flight: int = 0  # simulator requests in flight just before the signal
    commit_window: bool = False  # the kill left a journal whose part was already committed
    exits: list[int] = field(default_factory=list)


def start_sim(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.sim", "--port", "0", *args], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise RuntimeError(f"the simulator did not start: {url!r}")
    return proc, url


def write_inputs(
    work: Path, n: int, url: str, sync_s: float, shard_rows: int, hang: bool = False, output: str = ""
) -> Path:
    with open(work / "prompts.jsonl", "wb") as fh:
        for i in range(n):
            fh.write(orjson.dumps({"id": f"c{i:06d}", "prompt": f"Chaos prompt {i}: count to {i % 17}."}) + b"\n")
    cfg = work / "chaos.toml"
    cfg.write_text(
        f'[input]\npath = "{work / "prompts.jsonl"}"\n'
        f'[output]\ndir = "{output or work / "run"}"\nshard_rows = {shard_rows}\n'
        f"row_group_rows = 16\nsync_interval_s = {sync_s}\n"
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 2048\n'
        "[client]\nbackoff_base_s = 0.01\nbackoff_max_s = 0.1\ndrain_timeout_s = 5\n"
        + (f"request_timeout_s = {HANG_REQUEST_TIMEOUT_S}\nhang_floor_s = 1\n" if hang else "")
        + f'[[endpoints]]\nurl = "{url}"\nconcurrency = {CONCURRENCY}\n'
    )
    return cfg


def sim_stats(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/_sim/stats", timeout=10).json())


def run_argv(cfg: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", "run", str(cfg), "--no-progress", *extra]


def one_round(cfg: Path, url: str, rnd: Round, target: int, rng: random.Random, run_dir: Path) -> None:
    """Start the round's workers, signal them once `target` more completions are done (or early), reap them."""
    procs = [
        subprocess.Popen(
            run_argv(cfg, "--worker-index", str(i), "--num-workers", str(rnd.workers))
            + ["--set", f"output.shard_rows={rnd.shard_rows}"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(rnd.workers)
    ]
    start = sim_stats(url)["generations_total"]
    if rnd.early:
        time.sleep(rng.uniform(0.05, 1.2))
        now = sim_stats(url)
    else:
        now, first = _wait_for(url, procs, start, target)
        rnd.seconds = time.monotonic() - first
        if rnd.aim_commit:
            _wait_for_commit(run_dir, procs)
    rnd.in_flight = now["in_flight"]
    rnd.landed = any(p.poll() is None for p in procs)
    for proc in procs:
        proc.send_signal(getattr(signal, rnd.signal))
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        rnd.exits.append(proc.returncode)
    rnd.generated = sim_stats(url)["generations_total"] - start


def _wait_for(url: str, procs: list[subprocess.Popen[bytes]], start: int, target: int) -> tuple[dict[str, Any], float]:
    """Poll the simulator until `target` completions past `start` (or every process exited, or 60 s)."""
    first: float | None = None
    deadline = time.monotonic() + 60
    while True:
        now = sim_stats(url)
        done = now["generations_total"] - start
        if first is None and done > 0:
            first = time.monotonic()
        if done >= target or time.monotonic() > deadline or all(p.poll() is not None for p in procs):
            return now, first if first is not None else time.monotonic()
        time.sleep(0.02)


def _wait_for_commit(run_dir: Path, procs: list[subprocess.Popen[bytes]], timeout: float = 2.0) -> None:
    """Busy-poll shards/ and rejects/ until a part file appears: a commit has just renamed it, and the journal
    rotation follows within milliseconds, so a kill now often lands in between."""
    dirs = [run_dir / "shards", run_dir / "rejects"]
    before = {name for d in dirs for name in os.listdir(d)}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        if any(n.startswith("part-") and n not in before for d in dirs for n in os.listdir(d)):
            return


def in_commit_window(run_dir: Path) -> set[tuple[int, int]]:
    """(worker, seq) of each journal whose seq already has a committed part: the kill fell between a part's rename
    and the journal's rotation (one or both parts of the seq renamed; the journal not yet deleted)."""
    committed = set()
    for sub in ("shards", "rejects"):
        for path in (run_dir / sub).glob("part-w*.parquet"):
            worker, seq = path.name.split("-")[1:3]
            committed.add((int(worker[1:]), int(seq)))
    journals = run_dir / "journal"
    found = [_JOURNAL.match(p.name) for p in journals.iterdir()] if journals.is_dir() else []
    return {(int(m[1]), int(m[2])) for m in found if m} & committed


def check(run_dir: Path, n: int) -> dict[str, Any]:
    """The invariant over the finished RUN_DIR: every id exactly once, every committed file readable whole."""
    counts: Counter[str] = Counter()
    files = unreadable = attempts = 0
    for sub in ("shards", "rejects"):
        for path in (run_dir / sub).glob("*.parquet"):
            files += 1
            try:
                table = pq.read_table(path)
            except Exception:  # any failure to read is what we count
                unreadable += 1
                continue
            counts.update(table.column("id").to_pylist())
            attempts += sum(a or 0 for a in table.column("attempts").to_pylist())
    expected = {f"c{i:06d}" for i in range(n)}
    return {
        "files": files,
        "unreadable": unreadable,
        "rows": sum(counts.values()),
        "duplicates": sum(v - 1 for v in counts.values() if v > 1),
        "missing": len(expected - set(counts)),
        "unexpected": len(set(counts) - expected),
        "attempts": attempts,
        "leftover_journals": len(list((run_dir / "journal").glob("*.jsonl"))),
    }


def plan_round(rng: random.Random, k: int, max_workers: int, small: int, normal: int) -> Round:
    return Round(
        workers=rng.randint(1, max_workers),
        signal=rng.choices(["SIGKILL", "SIGTERM", "SIGINT"], weights=[6, 1, 1])[0],
        shard_rows=small if k % 2 else normal,
        early=(early := rng.random() < 0.15),
        aim_commit=bool(k % 2) and not early,
    )


def start_s3(work: Path) -> Any:
    """A local S3 server (moto) with the bucket `regen-chaos`; the environment of this process and of every
    `regen run` it starts points at it, and the user's cache (the working copies) is under `work`."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per S3 request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="chaos",
        AWS_SECRET_ACCESS_KEY="chaos-secret",
        AWS_DEFAULT_REGION="us-east-1",
        XDG_CACHE_HOME=str(work / "cache"),
    )
    boto3.client("s3").create_bucket(Bucket="regen-chaos")
    return server


def working_copy_of(output: str) -> Path:
    from pipeline.store.objects import parse_uri
    from pipeline.store.remote import working_copy

    return working_copy(parse_uri(output))


def fresh_copy(work: Path, output: str) -> Path:
    """The run as the bucket holds it, pulled into a new cache (another node's view)."""
    from pipeline.store.remote import local_copy

    os.environ["XDG_CACHE_HOME"] = str(work / "verify-cache")
    return local_copy(output)


def damage_one(run_dir: Path, rng: random.Random) -> int:
    """Truncate a random committed shard part to half its size; returns the rows it held (0 if none)."""
    parts = sorted((run_dir / "shards").glob("part-*.parquet"))
    if not parts:
        return 0
    victim = rng.choice(parts)
    rows = pq.ParquetFile(victim).metadata.num_rows
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    return rows


def chaos(
    prompts: int,
    kills: int,
    max_workers: int,
    seed: int,
    decode_rate: int,
    sync_s: float,
    small_shard_rows: int,
    damage: int = 0,
    hang: float = 0.0,
    s3: bool = False,
) -> dict[str, Any]:
    """Run the rounds and the final run in a fresh temp dir; return `report()`'s figures."""
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="regen-chaos-"))
    bucket = start_s3(work) if s3 else None
    output = "s3://regen-chaos/run" if s3 else ""
    run_dir = working_copy_of(output) if s3 else work / "run"
    faults = ["--fail-hang", str(hang)] if hang else []
    sim, url = start_sim([*SIM_FLAGS, "--decode-rate", str(decode_rate), "--max-running-requests", "64", *faults])
    damaged: list[int] = []
    try:
        normal = max(20, prompts // 12)
        cfg = write_inputs(work, prompts, url, sync_s, shard_rows=normal, hang=bool(hang), output=output)
        rounds = []
        windows: set[tuple[int, int]] = set()
        for k in range(kills):
            rnd = plan_round(rng, k, max_workers, small_shard_rows, normal)
            remaining = prompts - sim_stats(url)["generations_total"]
            target = max(1, int(rng.uniform(0.3, 1.2) * remaining / (kills - k + 1)))
            one_round(cfg, url, rnd, target, rng, run_dir)
            found = in_commit_window(run_dir)
            rnd.commit_window = bool(found - windows)  # a round that never started leaves the last one's state
            windows = found
            rounds.append(rnd)
            if len(damaged) < damage and k % 2 == 1:  # between rounds: no writer is live
                damaged += [n] if (n := damage_one(run_dir, rng)) else []
        started = time.monotonic()
        final = subprocess.run(run_argv(cfg), cwd=ROOT, capture_output=True, text=True, timeout=900)
        final_s = time.monotonic() - started
        checked = fresh_copy(work, output) if s3 else run_dir  # what the bucket holds, not this node's copy
        result = report(checked, prompts, rounds, final, final_s, sim_stats(url), sync_s, sum(damaged))
        set_aside = run_dir / "damaged"
        result.update(
            damaged_parts=len(damaged),
            damaged_rows=sum(damaged),
            set_aside=len(list(set_aside.iterdir())) if set_aside.is_dir() else 0,
            hangs=sim_stats(url)["faults"].get("hang", 0),
        )
        return result
    finally:
        sim.send_signal(signal.SIGKILL)
        sim.wait()
        if bucket is not None:
            bucket.stop()


def report(
    run_dir: Path,
    prompts: int,
    rounds: list[Round],
    final: subprocess.CompletedProcess[str],
    final_s: float,
    stats: dict[str, Any],
    sync_s: float,
    regenerated: int = 0,
) -> dict[str, Any]:
    result = check(run_dir, prompts)
    timed = [r for r in rounds if r.seconds > 0.2]
    rate = sum(r.generated for r in timed) / sum(r.seconds for r in timed) if timed else 0.0
    bound = sum(r.workers * CONCURRENCY + rate * sync_s for r in rounds) + regenerated
    wasted = stats["generations_total"] - result["attempts"]
    kills = len(rounds)
    result.update(
        final_exit=final.returncode,
        final_stderr=final.stderr[-2000:] if final.returncode else "",
        final_s=round(final_s, 2),
        kills=kills,
        kills_landed=sum(r.landed for r in rounds),
        signals=dict(Counter(r.signal for r in rounds)),
        early_kills=sum(r.early for r in rounds),
        kills_aimed_at_commit=sum(r.aim_commit for r in rounds),
        kills_in_commit_window=sum(r.commit_window for r in rounds),
        small_shard_rounds=sum(r.shard_rows < max(20, prompts // 12) for r in rounds),
        generations=stats["generations_total"],
        duplicate_generations=stats["duplicate_generations"],  # includes the validator's own retries
        wasted_generations=wasted,
        wasted_per_kill=round(wasted / max(1, kills), 2),
        sigkills=(sigkills := sum(r.signal == "SIGKILL" for r in rounds)),
        wasted_per_sigkill=round(wasted / max(1, sigkills), 2),  # a clean drain (SIGTERM/SIGINT) wastes ~nothing
        completion_rate=round(rate, 1),
        wasted_bound=round(bound, 1),
        wasted_bound_per_kill=round(bound / max(1, kills), 1),
        rounds=[r.__dict__ for r in rounds],
        work_dir=str(run_dir),
    )
    return result


def ok(result: dict[str, Any]) -> bool:
    clean = all(result[k] == 0 for k in ("duplicates", "missing", "unexpected", "unreadable", "final_exit"))
    set_aside = result.get("set_aside", 0) == result.get("damaged_parts", 0)
    return (
        clean
        and set_aside
        and result["leftover_journals"] == 0
        and result["wasted_generations"] <= result["wasted_bound"]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=3000)
    ap.add_argument("--kills", type=int, default=12)
    ap.add_argument("--max-workers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "1")))
    ap.add_argument("--decode-rate", type=int, default=30000, help="simulator aggregate tokens/s (64 running)")
    ap.add_argument("--sync-interval", type=float, default=1.0)
    ap.add_argument("--small-shard-rows", type=int, default=4, help="shard_rows of every other round")
    ap.add_argument("--damage", type=int, default=0, help="committed parts to truncate between rounds")
    ap.add_argument("--hang", type=float, default=0.0, help="share of requests the simulator holds forever")
    ap.add_argument("--s3", action="store_true", help="run in a bucket on a local S3 server (moto)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = chaos(
        args.prompts,
        args.kills,
        args.max_workers,
        args.seed,
        args.decode_rate,
        args.sync_interval,
        args.small_shard_rows,
        args.damage,
        args.hang,
        args.s3,
    )
    print(json.dumps(result, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0 if ok(result) else 1


if __name__ == "__main__":
    raise SystemExit(main())
