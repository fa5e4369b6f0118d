"""Worker heartbeats written from several threads at once, and the last beat after the periodic one is cancelled.

A real run (vLLM, tests/real) died at its end with FileNotFoundError: the periodic beat, cancelled while its thread
was writing, and the worker's last beat shared one temporary file, and the first `os.replace` took it from the other.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from pipeline.store import heartbeat


def test_beats_from_many_threads_at_once_never_fail_and_leave_a_whole_beat(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def write(state: str) -> None:
        start.wait()
        try:
            for _ in range(200):
                heartbeat.beat(tmp_path, 0, 1.0, state)
        except BaseException as e:  # the failure is what the test reports
            errors.append(e)

    threads = [threading.Thread(target=write, args=(f"s{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    beat = heartbeat.read_beats(tmp_path)[0]
    assert beat.worker == 0 and beat.state.startswith("s")
    assert sorted(p.name for p in (tmp_path / "heartbeats").iterdir()) == ["worker-0.json"]  # no temporary left


def test_the_last_beat_is_never_overwritten_by_a_cancelled_periodic_one(tmp_path: Path) -> None:
    async def worker(yields: int) -> None:
        heart = asyncio.create_task(heartbeat.keep_beating(tmp_path, 0, 1.0, interval_s=0))
        for _ in range(yields):  # cancelled at a different point of its beats each round
            await asyncio.sleep(0)
        heart.cancel()
        await asyncio.wait([heart])
        heartbeat.beat(tmp_path, 0, 1.0, "finished")

    for yields in range(60):
        asyncio.run(worker(yields))  # returns once every thread it started has ended: any stray beat is on disk
        assert heartbeat.read_beats(tmp_path)[0].state == "finished", yields
