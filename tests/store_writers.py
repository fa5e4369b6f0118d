"""Writer subprocesses for the crash tests: a RunStore writing synthetic rows in a real process, SIGKILLed mid-write.

The writer half (`todo`, `add_row`, `sync`, `close`) runs inside the child's `python -c` script; it prints one line
per event: `open ...` once the store is open, `syncing <ids>` before those ids' sync starts (a SIGKILL can land after
the sync committed them and before the next line), `synced <ids>` once they are durable, `closed` at the end. The
parent half (`Writer`, `outcome`) starts the child, reads those lines on a thread and kills it with SIGKILL.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from pipeline.store import ResumeState, RunStore, id_hash, owns
from pipeline.store import synthetic as syn

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- in the writer process


def todo(state: ResumeState, total: int, worker: int, workers: int) -> Iterator[str]:
    """The prompt ids p0 .. p{total-1} this worker owns and the run has not done."""
    for i in range(total):
        pid = f"p{i}"
        if id_hash(pid) in state.done or not owns(id_hash(pid), worker, workers):
            continue
        yield pid


def add_row(store: RunStore, pid: str, rng: random.Random) -> None:
    """One row for `pid`: rejected one time in five, else accepted with 10-3,000 bytes of text."""
    if rng.random() < 0.2:
        store.add_rejected(syn.rejected(pid))
    else:
        store.add_accepted(syn.accepted(pid, text_bytes=rng.randrange(10, 3000)))


def sync(store: RunStore, batch: list[str]) -> None:
    print("syncing", *batch, flush=True)
    store.sync_blocking()
    print("synced", *batch, flush=True)


def close(store: RunStore, batch: list[str]) -> None:
    print("syncing", *batch, flush=True)
    store.close()
    print("synced", *batch, flush=True)
    print("closed", flush=True)


# ---------------------------------------------------------------- in the test


class Writer:
    """One writer process running `script` with `args`; with `kill_after_sync` (k, delay) it is SIGKILLed `delay`
    seconds after it reports its k-th sync."""

    def __init__(self, script: str, args: Sequence[object], kill_after_sync: tuple[int, float] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        self.kill = kill_after_sync
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
            syncs += line.split(maxsplit=1)[:1] == ["synced"]
            if self.kill is not None and syncs == self.kill[0]:
                self.kill_in(self.kill[1])
        self.opened.set()

    def kill_in(self, delay: float) -> None:
        threading.Timer(delay, self.proc.send_signal, (signal.SIGKILL,)).start()

    def finish(self, timeout: float) -> None:
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def outcome(writers: Sequence[Writer]) -> tuple[set[str], int]:
    """The ids the writers reported synced, and how many of them finished."""
    return _ids(writers, "synced"), sum(any(line.startswith("closed") for line in w.lines) for w in writers)


def announced(writers: Sequence[Writer]) -> set[str]:
    """The ids the writers announced before syncing them: what a store may hold, synced or cut off mid-sync."""
    return _ids(writers, "syncing")


def _ids(writers: Sequence[Writer], event: str) -> set[str]:
    return {
        pid for w in writers for line in w.lines if line.split(maxsplit=1)[:1] == [event] for pid in line.split()[1:]
    }
