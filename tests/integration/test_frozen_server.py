"""A server frozen mid-batch and then resumed: its requests move elsewhere, and it must not finish them for nobody.

SGLang does not notice that a non-streaming request's client has gone while the request decodes (the simulator's
`--disconnect-check`, as `_wait_one_response` in python/sglang/srt/managers/tokenizer_manager.py), so each request
the client moved away from the frozen server would decode to its end once the server resumed: a duplicate
generation of the retry. The client aborts every moved rid in the background; the aborts wait in the frozen
server's socket and land when it resumes.

Scaled time: requests last ~2 s, several times the health interval (0.2 s), the health timeout (0.4 s) and the
simulator's disconnect check (0.4 s); the freeze lasts until regen has declared the server down.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path

from tests.helpers import SIM_FLAGS, assert_exactly_once, write_prompts
from tests.helpers.endpoint_runs import config, start_run, wait_for

TIMED = ("--decode-rate", "1200", "--max-running-requests", "8", "--disconnect-check", "0.4")  # 300 tokens: ~2 s


def test_a_resumed_server_does_not_finish_the_requests_that_moved_away(tmp_path: Path, sim) -> None:
    steady = sim(*SIM_FLAGS, *TIMED, "--seed", "1")
    frozen = sim(*SIM_FLAGS, *TIMED, "--seed", "2")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=96)
    health = "health_interval_s = 0.2\nhealth_timeout_s = 0.4\nhealth_failures = 2\n"
    proc = start_run(config(tmp_path, [steady.url, frozen.url], client="connect_timeout_s = 1", health=health))
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: frozen.stats()["generations_total"] >= 8)  # its batch is full and turning over
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        # frozen until regen has declared it down (two missed probes) and so moved its requests: its log says so
        wait_for(lambda: any(f"{frozen.url}: down (" in line for line in lines), timeout=60)
        os.kill(frozen.proc.pid, signal.SIGCONT)
        proc.wait(timeout=120)
    finally:
        os.kill(frozen.proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    err = "".join(lines)
    assert proc.returncode == 0, err[-3000:]
    assert f"{frozen.url}: down (" in err and f"{frozen.url}: up again" in err
    assert_exactly_once(tmp_path / "run", ids)
    per_prompt: Counter[str] = Counter()
    for server in (steady, frozen):
        per_prompt.update(server.stats()["generations"])
    moved = frozen.stats()["cancelled"]
    assert moved >= 4, err[-3000:]  # the frozen batch was moved and aborted there, not finished
    assert [k for k, n in per_prompt.items() if n > 1] == []  # no prompt generated twice
    assert frozen.stats()["in_flight"] == 0
