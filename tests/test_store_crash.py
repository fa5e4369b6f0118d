"""SIGKILL a real process writing through RunStore at random moments, resume, check exactly-once."""

import random
import textwrap
from pathlib import Path

from pipeline.store import RunStore
from tests.helpers.exactly_once import committed
from tests.store_writers import Writer, outcome

TOTAL = 1500

WRITER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from pipeline.store import RunStore
    from tests.store_writers import add_row, close, sync, todo

    run_dir, total, seed, retry = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    worker, workers = int(sys.argv[5]), int(sys.argv[6])
    rng = random.Random(seed)
    store = RunStore(run_dir, worker_index=worker, num_workers=workers, keep_fields=(), shard_rows=40,
                     row_group_rows=8)
    state = store.open(retry_rejects=retry)
    print("open", state.accepted, state.rejected, flush=True)
    batch, target = [], rng.randrange(1, 25)
    for pid in todo(state, total, worker, workers):
        add_row(store, pid, rng)
        batch.append(pid)
        if len(batch) >= target:
            sync(store, batch)
            batch, target = [], rng.randrange(1, 25)
    close(store, batch)
    """
)


def _run(run_dir: Path, seed: int, *, retry: bool, kill_after: list[tuple[int, float] | None]) -> tuple[set[str], int]:
    """One writer process per entry of `kill_after`, all at once. An entry (k, delay) SIGKILLs its writer `delay`
    seconds after it reported its k-th sync, so the kill lands mid-write however loaded the machine is (a wall-clock
    timer let slow writers finish first); None leaves it to finish. Returns the ids they reported synced, and how
    many finished."""
    workers = len(kill_after)
    writers = [
        Writer(WRITER, (run_dir, TOTAL, seed * 10 + w, "1" if retry else "0", w, workers), kill)
        for w, kill in enumerate(kill_after)
    ]
    for writer in writers:
        assert writer.opened.wait(30), "writer did not open"
    for writer in writers:
        writer.finish(timeout=60)
    return outcome(writers)


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
        counts = committed(run)  # reads every column: files are complete
        assert [pid for pid, n in counts.items() if n > 1] == []
        assert synced_ever <= set(counts)
    assert kills >= 10  # of 12 writers; one may still finish if its last prompts came before the kill
    _, finished = _run(run, seed=99, retry=False, kill_after=[None, None])
    assert finished == 2
    counts = committed(run)
    assert [pid for pid, n in counts.items() if n > 1] == []
    assert synced_ever <= set(counts)
    assert set(counts) == {f"p{i}" for i in range(TOTAL)}
    assert list((run / "journal").iterdir()) == []
    assert [p.name for sub in ("shards", "rejects") for p in (run / sub).iterdir() if p.suffix != ".parquet"] == []
