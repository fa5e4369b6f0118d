"""SIGKILL a real process writing through RunStore at random moments, resume, check exactly-once."""

import random
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.store import RunStore

TOTAL = 1500

WRITER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from pipeline.store import RunStore, id_hash, owns
    from pipeline.store import synthetic as syn

    run_dir, total, seed, retry = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    worker, workers = int(sys.argv[5]), int(sys.argv[6])
    rng = random.Random(seed)
    store = RunStore(run_dir, worker_index=worker, num_workers=workers, keep_fields=(), shard_rows=40,
                     row_group_rows=8)
    state = store.open(retry_rejects=retry)
    print("open", state.accepted, state.rejected, flush=True)
    batch, target = [], rng.randrange(1, 25)
    for i in range(total):
        pid = f"p{i}"
        if id_hash(pid) in state.done or not owns(id_hash(pid), worker, workers):
            continue
        if rng.random() < 0.2:
            store.add_rejected(syn.rejected(pid))
        else:
            store.add_accepted(syn.accepted(pid, text_bytes=rng.randrange(10, 3000)))
        batch.append(pid)
        if len(batch) >= target:
            store.sync_blocking()
            print("synced", *batch, flush=True)
            batch, target = [], rng.randrange(1, 25)
    store.close()
    print("synced", *batch, flush=True)
    print("closed", flush=True)
    """
)


def _run(run_dir: Path, seed: int, *, retry: bool, kill_after: list[tuple[int, float] | None]) -> tuple[set[str], int]:
    """One writer process per entry of `kill_after`, all at once. An entry (k, delay) SIGKILLs its writer `delay`
    seconds after it reported its k-th sync, so the kill lands mid-write however loaded the machine is (a wall-clock
    timer let slow writers finish first); None leaves it to finish. Returns the ids they reported synced, and how
    many finished."""
    workers = len(kill_after)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                str(run_dir),
                str(TOTAL),
                str(seed * 10 + w),
                "1" if retry else "0",
                str(w),
                str(workers),
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        for w in range(workers)
    ]
    outputs = [_Output(p, kill) for p, kill in zip(procs, kill_after, strict=True)]
    for output in outputs:
        assert output.opened.wait(30), "writer did not open"
    for output in outputs:
        output.finish()
    synced = {pid for o in outputs for line in o.lines if line.startswith("synced") for pid in line.split()[1:]}
    return synced, sum(any(line.startswith("closed") for line in o.lines) for o in outputs)


class _Output:
    def __init__(self, proc: subprocess.Popen[str], kill: tuple[int, float] | None) -> None:
        self.proc = proc
        self.kill = kill
        self.lines: list[str] = []
        self.opened = threading.Event()
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        syncs = 0
        for line in self.proc.stdout:
            self.lines.append(line)
            self.opened.set()
            syncs += line.startswith("synced")
            if self.kill is not None and syncs == self.kill[0]:
                threading.Timer(self.kill[1], self.proc.send_signal, (signal.SIGKILL,)).start()
        self.opened.set()

    def finish(self) -> None:
        self.proc.wait(timeout=60)
        self.reader.join(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


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
    for round in range(6):
        retry = round % 3 == 2  # some resumes re-attempt rejects, moving ids between directories
        workers = [1, 3, 2, 3, 1, 2][round]  # the worker count changes between runs
        kills_at: list[tuple[int, float] | None] = [(rng.randint(1, 6), rng.uniform(0.0, 0.03)) for _ in range(workers)]
        synced, finished = _run(run, seed=round, retry=retry, kill_after=kills_at)
        synced_ever |= synced
        kills += workers - finished
        store = RunStore(run, worker_index=0, num_workers=1, keep_fields=())
        store.open()  # recovery alone restores the invariant
        store.close()
        counts = _committed(run)
        assert [pid for pid, n in counts.items() if n > 1] == []
        assert synced_ever <= set(counts)
    assert kills >= 10  # of 12 writers; one may still finish if its last prompts came before the kill
    _, finished = _run(run, seed=99, retry=False, kill_after=[None, None])
    assert finished == 2
    counts = _committed(run)
    assert [pid for pid, n in counts.items() if n > 1] == []
    assert synced_ever <= set(counts)
    assert set(counts) == {f"p{i}" for i in range(TOTAL)}
    assert list((run / "journal").iterdir()) == []
    assert [p.name for sub in ("shards", "rejects") for p in (run / sub).iterdir() if p.suffix != ".parquet"] == []
