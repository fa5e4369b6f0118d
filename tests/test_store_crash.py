"""SIGKILL a real process writing through RunStore at random moments, resume, check exactly-once."""

import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.store import RunStore

TOTAL = 3000

WRITER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from pipeline.store import RunStore, id_hash
    from pipeline.store import synthetic as syn

    run_dir, total, seed, retry = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    rng = random.Random(seed)
    store = RunStore(run_dir, worker_index=0, num_workers=1, keep_fields=(), shard_rows=40, row_group_rows=8)
    state = store.open(retry_rejects=retry)
    print("open", state.accepted, state.rejected, flush=True)
    batch = []
    for i in range(total):
        pid = f"p{i}"
        if id_hash(pid) in state.done:
            continue
        if rng.random() < 0.2:
            store.add_rejected(syn.rejected(pid))
        else:
            store.add_accepted(syn.accepted(pid, text_bytes=rng.randrange(10, 3000)))
        batch.append(pid)
        if len(batch) == rng.randrange(1, 25):
            store.sync_blocking()
            print("synced", *batch, flush=True)
            batch = []
    store.close()
    print("synced", *batch, flush=True)
    print("closed", flush=True)
    """
)


def _run(run_dir: Path, seed: int, *, retry: bool, kill_after: float | None) -> tuple[set[str], bool]:
    """One writer process; returns the ids it reported synced, and whether it finished."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir), str(TOTAL), str(seed), "1" if retry else "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    lines: list[str] = []
    opened = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            opened.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert opened.wait(30), "writer did not open"
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    reader.join(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()
    synced = {pid for line in lines if line.startswith("synced") for pid in line.split()[1:]}
    return synced, any(line.startswith("closed") for line in lines)


def _committed(run_dir: Path) -> Counter[str]:
    ids: list[str] = []
    for sub in ("shards", "rejects"):
        for path in (run_dir / sub).glob("*.parquet"):
            ids += pq.read_table(path).column("id").to_pylist()  # reads every column: files are complete
    return Counter(ids)


def test_repeated_sigkill_loses_nothing_synced_and_duplicates_nothing(tmp_path):
    rng = random.Random(20240601)
    run = tmp_path / "run"
    synced_ever: set[str] = set()
    kills = 0
    for round in range(8):
        retry = round % 3 == 2  # some resumes re-attempt rejects, moving ids between directories
        synced, finished = _run(run, seed=round, retry=retry, kill_after=rng.uniform(0.0, 0.35))
        synced_ever |= synced
        kills += not finished
        store = RunStore(run, worker_index=0, num_workers=1, keep_fields=())
        store.open()  # recovery alone must restore the invariant
        store.close()
        counts = _committed(run)
        assert [pid for pid, n in counts.items() if n > 1] == []
        assert synced_ever <= set(counts)
    assert kills >= 4
    _, finished = _run(run, seed=99, retry=False, kill_after=None)
    assert finished
    counts = _committed(run)
    assert [pid for pid, n in counts.items() if n > 1] == []
    assert synced_ever <= set(counts)
    assert set(counts) == {f"p{i}" for i in range(TOTAL)}
    assert list((run / "journal").iterdir()) == []
    assert [p.name for sub in ("shards", "rejects") for p in (run / sub).iterdir() if p.suffix != ".parquet"] == []
