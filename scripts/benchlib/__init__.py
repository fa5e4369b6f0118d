"""What every benchmark scenario shares: the simulator as a child process, one child's wall/CPU/peak RSS, the
prompt and config files a run reads, and the rates and ids a run directory holds.

The scenarios live one per module next to this one; `scripts/bench.py` parses argv and calls them.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.compute as pc
import pyarrow.dataset as pds

ROOT = Path(__file__).resolve().parent.parent.parent
SIM_CORE, CLIENT_CORE = "1", "0"


def pinned(core: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", core, *argv] if shutil.which("taskset") and os.cpu_count() and os.cpu_count() > 1 else argv


class Sim:
    def __init__(self, *args: str, core: str = SIM_CORE):
        argv = pinned(core, [sys.executable, "-m", "pipeline.sim", "--port", "0", *args])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stats(self, log: bool = False) -> dict[str, Any]:
        """`/_sim/stats`; with `log`, each prompt's generations as [rid, wall time] pairs too."""
        return httpx.get(f"{self.url}/_sim/stats", params={"log": "1"} if log else None, timeout=30).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def hwm_mb(pid: int) -> float:
    """The process's own peak RSS (VmHWM). Not ru_maxrss: on Linux exec carries the forking parent's peak over."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def timed(argv: list[str], **kw: Any) -> dict[str, Any]:
    """Wall time, CPU time and peak RSS of one child process."""
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, hwm_mb(proc.pid))
        time.sleep(0.05)
    wall = time.monotonic() - t0
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:6]} failed: {err[-2000:]}")
    return {"wall_s": wall, "cpu_s": children_cpu() - cpu0, "rss_mb": peak, "stdout": out, "end": time.time()}


def write_prompts(path: Path, n: int, chars: int = 200) -> None:
    filler = ("Explain the reasoning step by step and give a final answer. " * 8)[:chars]
    with open(path, "wb") as fh:
        for i in range(n):
            fh.write(orjson.dumps({"id": f"b{i:07d}", "prompt": f"#{i} {filler}"}) + b"\n")


def write_config(work: Path, urls: list[str], concurrency: int, prompts: Path, **extra: Any) -> Path:
    cfg = work / f"bench-{len(list(work.glob('bench-*.toml')))}.toml"
    eps = "".join(f'[[endpoints]]\nurl = "{u}"\nconcurrency = {concurrency}\n' for u in urls)
    shard_rows = extra.get("shard_rows", 10000)
    cfg.write_text(
        f'[input]\npath = "{prompts}"\n[output]\ndir = "{work / ("run-" + cfg.stem)}"\nshard_rows = {shard_rows}\n'
        f'[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 32768\n'
        "[client]\nbackoff_base_s = 0.05\nbackoff_max_s = 1\n" + extra.get("client", "") + eps
    )
    return cfg


def steady_rate(run_dir: Path) -> tuple[float, float, int, float]:
    """(completions/s, output tok/s, rows, last created_at) between the first and last stored completion."""
    ds = pds.dataset(str(run_dir / "shards"), format="parquet")
    t = ds.to_table(columns=["created_at", "completion_tokens"])
    ts = pc.cast(t.column("created_at"), "int64")
    lo, hi = pc.min(ts).as_py() / 1e6, pc.max(ts).as_py() / 1e6
    span = max(1e-6, hi - lo)
    tokens = pc.sum(t.column("completion_tokens")).as_py() or 0
    return t.num_rows / span, tokens / span, t.num_rows, hi


def ids_and_shard_sizes(run_dir: Path) -> tuple[dict[str, int], list[int]]:
    """How often each id is committed (shards and rejects), and the byte size of every shard."""
    counts: dict[str, int] = {}
    sizes = [f.stat().st_size for f in sorted((run_dir / "shards").glob("*.parquet"))]
    for sub in ("shards", "rejects"):
        for f in sorted((run_dir / sub).glob("*.parquet")):
            for i in pds.dataset(str(f)).to_table(columns=["id"]).column("id").to_pylist():
                counts[i] = counts.get(i, 0) + 1
    return counts, sizes
