"""Scenario 2, scale: the seed's job at its size (issue 40). For each size, a seed-shaped dataset (ShareGPT rows whose
`gpt` turns are empty, 5% two rounds, 10% with a system turn: `pipeline.store.synthetic.seed_dataset`), one instant
simulator, the project's defaults with plain responses, then what a user does, each step a command of its own:

    run (SIGKILLed at 35% of the rows, then rerun), status, status --json, inspect, inspect --json, inspect --html,
    validate, audit of the original, export chat / specforge / sharegpt / prompt-completion / repaired --original /
    openai-batch-output, merge, and export --push-to-hub up to its upload (to a Hub address where nothing listens)

Each step's wall time and peak RSS are the command's own: `/usr/bin/time -f %M` around it (the child's maxrss, not
the benchmark's). The run's figure is the larger of its two processes. The report gives every step at every size
and, per step, the ratio of the largest size to the smallest. The exactly-once check closes the run step.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import ROOT, Sim
from pipeline.store.synthetic import seed_dataset

KILL_AT = 0.35
TIME = "/usr/bin/time"


def _timed(argv: list[str], out: Path, *, kill_at: tuple[Path, float] | None = None, ok: tuple[int, ...] = (0,),
           env: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Run `argv` under /usr/bin/time; with `kill_at` (a metrics file, a share of the rows) SIGKILL the command once
    its metrics say that share is done. Returns wall_s, rss_mb, the exit status and the stderr's tail."""
    stats = out.with_suffix(".time")
    t0 = time.monotonic()
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [TIME, "-o", str(stats), "-f", "%e %M", *argv],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        killed = False
        while kill_at is not None and proc.poll() is None:
            metrics, share = kill_at
            if _done_share(metrics) >= share:
                for child in _children(proc.pid):
                    os.kill(child, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.5)
        _, err = proc.communicate()
    wall = time.monotonic() - t0
    last = stats.read_text().strip().splitlines()[-1].split()
    if proc.returncode not in ok and not killed:
        raise RuntimeError(f"{' '.join(argv[:5])} exited {proc.returncode}: {err.decode()[-2000:]}")
    return {"wall_s": round(wall, 1), "rss_mb": round(int(last[1]) / 1024, 1), "killed": killed, "stderr": err}


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _done_share(metrics: Path) -> float:
    try:
        with open(metrics, "rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - 65536))
            line = fh.read().splitlines()[-1]
        last = json.loads(line)
        return last["done"] / max(1, last["total"])
    except (OSError, IndexError, ValueError, KeyError):
        return 0.0


def _config(work: Path, url: str, dataset: Path) -> Path:
    cfg = work / "seed.toml"
    cfg.write_text(
        f'[input]\npath = "{dataset}"\n[output]\ndir = "{work / "run"}"\n'
        f'[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 16384\n'
        f'[[endpoints]]\nurl = "{url}"\nconcurrency = 64\n'
    )
    return cfg


def seed_job(work: Path, rows: int, tokens: int = 1818, keep: Path | None = None) -> dict[str, Any]:
    """The whole sequence at one size; {step: {wall_s, rss_mb}} and the run's own figures. With `keep`, the run
    directory and the dataset are also kept there (hard links, before `merge` rewrites the run) for `after_run`."""
    work.mkdir(parents=True, exist_ok=True)
    dataset = work / "seed.jsonl"
    seed_dataset(dataset, rows)
    sim = Sim("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", str(tokens))
    steps: dict[str, Any] = {}
    try:
        cfg = _config(work, sim.url, dataset)
        run_dir = work / "run"
        regen = [sys.executable, "-m", "pipeline"]
        first = _timed([*regen, "run", str(cfg), "--no-progress"], work / "run-1.out",
                       kill_at=(run_dir / "metrics" / "worker-0.jsonl", KILL_AT))  # fmt: skip
        second = _timed([*regen, "run", str(cfg), "--no-progress"], work / "run-2.out")
        steps["run"] = {"wall_s": round(first["wall_s"] + second["wall_s"], 1),
                        "rss_mb": max(first["rss_mb"], second["rss_mb"]), "killed": first["killed"]}  # fmt: skip
    finally:
        sim.stop()
    steps["run"].update(_exactly_once(run_dir, rows))
    if keep is not None:
        shutil.copytree(run_dir, keep / "run", copy_function=os.link)
        os.link(dataset, keep / "seed.jsonl")
    steps.update(after_run(work, run_dir, dataset))
    return steps


def after_run(work: Path, run_dir: Path, dataset: Path) -> dict[str, Any]:
    """Every command a user runs after the run, each timed on its own: {step: {wall_s, rss_mb}} and the disk."""
    regen = [sys.executable, "-m", "pipeline"]
    steps: dict[str, Any] = {}
    out = work / "out"
    commands = {
        "status": ["status", str(run_dir)],
        "status --json": ["status", str(run_dir), "--json"],
        "inspect": ["inspect", str(run_dir)],
        "inspect --json": ["inspect", str(run_dir), "--json"],
        "inspect --html": ["inspect", str(run_dir), "--html", str(out / "report.html")],
        "validate": ["validate", str(run_dir)],
        "audit": ["audit", str(dataset)],
        "export chat": ["export", str(run_dir), "--format", "chat", "--out", str(out / "chat")],
        "export specforge": ["export", str(run_dir), "--format", "specforge", "--out", str(out / "specforge")],
        "export sharegpt": ["export", str(run_dir), "--format", "sharegpt", "--out", str(out / "sharegpt")],
        "export prompt-completion": ["export", str(run_dir), "--format", "prompt-completion", "--out",
                                     str(out / "pc")],
        "export repaired": ["export", str(run_dir), "--format", "repaired", "--original", str(dataset), "--out",
                            str(out / "repaired")],
        "export openai-batch-output": ["export", str(run_dir), "--format", "openai-batch-output", "--out",
                                       str(out / "batch")],
        "merge": ["merge", str(run_dir), "--target-rows", "100000"],
    }  # fmt: skip
    out.mkdir(exist_ok=True)
    for name, argv in commands.items():
        # audit exits 1 when it finds broken rows, as it does here: every `gpt` turn of the seed is empty
        ok = (0, 1) if name == "audit" else (0,)
        steps[name] = _timed([*regen, *argv], work / f"{name.replace(' ', '_')}.out", ok=ok)
        steps[name].pop("killed")
        steps[name].pop("stderr")
    steps["export --push-to-hub (preparation)"] = _hub_preparation(regen, run_dir, work, out)
    steps["disk"] = {"run_dir_gib": round(_du(run_dir) / 2**30, 2)}
    return steps


def _hub_preparation(regen: list[str], run_dir: Path, work: Path, out: Path) -> dict[str, Any]:
    """`export --push-to-hub` up to the upload: the export and its card are written, then the upload goes to a Hub
    address where nothing listens and fails (exit 2), so the figure is the command's own preparation; the upload
    itself is huggingface_hub's. Refuses a figure unless the export finished and the failure was the upload's."""
    folder = out / "hub"
    argv = [*regen, "export", str(run_dir), "--format", "specforge", "--out", str(folder),
            "--push-to-hub", "bench/seed", "--allow-simulated"]  # fmt: skip
    step = _timed(argv, work / "export_push-to-hub.out", ok=(2,), env={"HF_ENDPOINT": "http://127.0.0.1:9",
                                                                        "HF_TOKEN": "hf_bench"})  # fmt: skip
    said = (work / "export_push-to-hub.out").read_text()
    if "exported " not in said or b"to the Hub dataset bench/seed failed" not in step["stderr"]:
        raise RuntimeError(f"--push-to-hub did not stop at the upload: {said[-500:]} {step['stderr'][-1000:]!r}")
    step.pop("killed")
    step.pop("stderr")
    return step


def _after_kept(work: Path, kept: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(kept / "run", work / "run", copy_function=os.link)
    return after_run(work, work / "run", kept / "seed.jsonl")


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _exactly_once(run_dir: Path, rows: int) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as pds

    ids = []
    for part in ("shards", "rejects"):
        if any((run_dir / part).glob("*.parquet")):
            ids.append(pds.dataset(run_dir / part, format="parquet").to_table(columns=["id"]).column("id"))
    counts = pc.value_counts(pa.concat_arrays([c.combine_chunks() for c in ids]))
    dupes = sum(1 for c in counts.field("counts").to_pylist() if c > 1)
    return {"ids": len(counts), "duplicates": dupes, "missing": rows - len(counts)}


def bench_scale(work: Path, sizes: list[int], tokens: int = 1818, *, keep: Path | None = None,
                after: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Every size's sequence, then each step's ratio of the largest size to the smallest (wall and RSS). `keep`:
    keep each size's run and dataset under keep/seed-N; `after`: no run, the steps after it on after/seed-N's
    (hard-linked into `work` first: merge rewrites a run)."""
    if after is not None:
        by_size = {n: _after_kept(work / f"seed-{n}", after / f"seed-{n}") for n in sorted(sizes)}
    else:
        by_size = {n: seed_job(work / f"seed-{n}", n, tokens, keep / f"seed-{n}" if keep else None)
                   for n in sorted(sizes)}  # fmt: skip
    small, big = min(by_size), max(by_size)
    table = {}
    for step, figures in by_size[big].items():
        if "rss_mb" not in figures:
            continue
        low = by_size[small][step]
        table[step] = {
            f"wall_s@{small}": low["wall_s"], f"wall_s@{big}": figures["wall_s"],
            "wall_ratio": round(figures["wall_s"] / max(low["wall_s"], 0.01), 2),
            f"rss_mb@{small}": low["rss_mb"], f"rss_mb@{big}": figures["rss_mb"],
            "rss_ratio": round(figures["rss_mb"] / low["rss_mb"], 2),
        }  # fmt: skip
    print(markdown(table, small, big), flush=True)
    flat = all(t["rss_ratio"] <= 1.2 for t in table.values())
    under = all(t[f"rss_mb@{big}"] < 1024 for t in table.values())
    return {"sizes": sorted(sizes), "steps": table, "runs": {n: v.get("run") for n, v in by_size.items()},
            "disk": {n: v["disk"] for n, v in by_size.items()},
            "targets": {"every step rss <= 1.2x": flat, "every step < 1 GB": under}}  # fmt: skip


def markdown(table: dict[str, dict[str, Any]], small: int, big: int) -> str:
    """The table BENCHMARKS.md keeps."""
    head = f"| step | wall @{small:,} | wall @{big:,} | ratio | peak RSS @{small:,} | peak RSS @{big:,} | ratio |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for step, t in table.items():
        lines.append(
            f"| `{step}` | {t[f'wall_s@{small}']} s | {t[f'wall_s@{big}']} s | {t['wall_ratio']}x "
            f"| {t[f'rss_mb@{small}']} MB | {t[f'rss_mb@{big}']} MB | {t['rss_ratio']}x |"
        )
    return "\n".join(lines)
