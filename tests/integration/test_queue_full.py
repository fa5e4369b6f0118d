"""A server that answers 503 "The request queue is full." in bursts is live and full, not down (issue 17's soak).

Scaled time: a request lasts ~1.2 s and stands for ~30 s, so every client timeout and interval is the default / 25
(health_interval_s 0.4 s, hence a control interval of 0.08 s; connect 0.4 s; backoff 0.02-1.2 s): a request lasts
three health intervals and fifteen control intervals, as a real one does. Two 16-slot simulators, automatic
concurrency; one refuses every generation for 1.2 s (a request's length) of every 4 s while its /health answers 200,
as SGLang's does when its queue is full. The run must never mark it down, lose or exhaust no prompt, and refill its
slots within half a request of each burst's end, but for one burst within two (sampled from its own /v1/loads).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import Counter
from pathlib import Path

import httpx
import orjson

from pipeline.sim.faults import in_burst
from tests.helpers import SIM_FLAGS, assert_exactly_once, write_prompts
from tests.helpers.exactly_once import read_rows
from tests.helpers.processes import regen
from tests.helpers.sampling import MAX_GAP_S, dense_count, spaced

SLOTS = 16
# 300-token completions at 4,000 tok/s shared by 16 slots: ~1.2 s each.
BUSY = ("--max-running-requests", str(SLOTS), "--decode-rate", "4000")
EVERY_S, FOR_S = 4.0, 1.2
REQUEST_S = 1.2
REFILL_BOUND_S = REQUEST_S / 2  # half a request; before, the endpoint went down and ramped back over several requests

# The client defaults / 25 (a 1.2 s request stands for 30 s).
CLIENT = {
    "request_timeout_s": 144, "connect_timeout_s": 0.4, "stall_timeout_s": 4.8, "hang_floor_s": 24,
    "backoff_base_s": 0.02, "backoff_max_s": 1.2, "drain_timeout_s": 1.2, "health_interval_s": 0.4,
    "health_timeout_s": 0.8, "recheck_interval_s": 2.4, "no_endpoint_timeout_s": 24, "sticky_wait_s": 0.2,
}  # fmt: skip


def config(tmp_path: Path, urls: list[str]) -> Path:
    eps = "".join(f'[[endpoints]]\nurl = "{u}"\nconcurrency = 0\n' for u in urls)
    client = "".join(f"{k} = {v}\n" for k, v in CLIENT.items())
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'[input]\npath = "{tmp_path / "prompts.jsonl"}"\n'
        f'[output]\ndir = "{tmp_path / "run"}"\nshard_rows = 200\nsync_interval_s = 0.2\n'
        '[generation]\nmodel = "Qwen3.6-27B"\nmax_tokens = 4096\n'
        f"[client]\nmax_attempts = 4\n{client}{eps}"
    )
    return cfg


class Loads:
    """Samples a server's running requests every 20 ms until the run has fewer than `tail` generations to go."""

    def __init__(self, url: str, all_urls: list[str], stop_after: int):
        self.url, self.all_urls, self.stop_after = url, all_urls, stop_after
        self.samples: list[tuple[float, int]] = []  # (monotonic time, num_running_reqs)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=2) as client:
            while not self.done.is_set():
                [load] = client.get(f"{self.url}/v1/loads").json()["loads"]
                self.samples.append((time.monotonic(), load["num_running_reqs"]))
                total = sum(client.get(f"{u}/_sim/stats").json()["generations_total"] for u in self.all_urls)
                if total >= self.stop_after:
                    return
                time.sleep(0.02)

    def dense_samples(self) -> int:
        """How many samples followed the one before within `MAX_GAP_S`."""
        return dense_count(self.samples)


def refill_times(samples: list[tuple[float, int]], opened: float, max_gap: float = MAX_GAP_S) -> list[float | None]:
    """For each burst that ended while sampling went on (and half a request before it stopped), the seconds from
    its end to the first sample with every slot running again; None where the sampler did not see the refill: a gap
    of more than `max_gap` between two samples from the last one before the burst's end to that first full one (the
    sampler starved, see `MAX_GAP_S`), which would count the sampler's delay as the run's."""
    times = [t for t, _ in samples]
    last = times[-1]
    out: list[float | None] = []
    end = opened + EVERY_S
    while end + 0.6 < last:
        first = bisect_left(times, end)  # the first sample at or after the burst's end
        full = next((i for i in range(first, len(samples)) if samples[i][1] >= SLOTS), len(samples) - 1)
        gaps = [times[first] - (times[first - 1] if first else end)]
        gaps += [b - a for a, b in zip(times[first:full], times[first + 1 : full + 1], strict=True)]
        out.append(round(times[full] - end, 3) if max(gaps) <= max_gap else None)
        end += EVERY_S
    return out


def test_bursts_of_queue_full_never_mark_the_endpoint_down_and_its_slots_refill(tmp_path: Path, sim) -> None:
    steady = sim(*SIM_FLAGS, *BUSY, "--seed", "1")
    bursty = sim(*SIM_FLAGS, *BUSY, "--seed", "2", "--fail-503-every", str(EVERY_S), "--fail-503-for", str(FOR_S))
    opened = time.monotonic()  # its bursts count from when its port opened (its URL line; a few ms later here)
    n = 520  # ~16 s of both servers' slots: four bursts
    ids = write_prompts(tmp_path / "prompts.jsonl", n=n)
    urls = [steady.url, bursty.url]
    loads = Loads(bursty.url, urls, stop_after=n - 4 * SLOTS)
    loads.thread.start()
    try:
        result = regen("run", str(config(tmp_path, urls)), "--no-progress", timeout=120)
    finally:
        loads.done.set()
        loads.thread.join()
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    good, bad = assert_exactly_once(run, ids)
    assert bad == [], Counter(r["reason"] for r in read_rows(run, "rejects"))  # nothing lost, nothing exhausted
    assert bursty.stats()["faults"]["burst_503"] >= 10  # the bursts did refuse this run's requests

    # Never marked down for a refusal: no down/up lines, and no metrics snapshot with it down.
    log = result.stderr
    assert "down (" not in log and "up again" not in log, log
    assert "pushing back" in log and "taking requests again" in log
    lines = (run / "metrics" / "worker-0.jsonl").read_bytes().splitlines()
    states = {orjson.loads(line)["endpoints"][bursty.url]["state"] for line in lines}
    assert states <= {"healthy", "degraded"}, states
    assert orjson.loads(lines[-1])["endpoints"][bursty.url]["pushbacks"] > 0

    refills = refill_times(loads.samples, opened)
    seen = [r for r in refills if r is not None]  # the refills the sampler saw closely (`refill_times`)
    bursting = [
        in_burst(t - opened, EVERY_S, FOR_S) or in_burst(t - opened - 0.1, EVERY_S, FOR_S) for t, _ in loads.samples
    ]
    healthy = [r for (t, r), b in zip(loads.samples, bursting, strict=True) if not b and t > opened + 1.5]
    print(
        "refill after each burst (s)",
        refills,
        "occupancy outside bursts",
        round(sum(healthy) / len(healthy) / SLOTS, 3),
        "dense",
        loads.dense_samples(),
        "of",
        len(loads.samples),
        "longest gap",
        round(max(b - a for (a, _), (b, _) in zip(loads.samples, loads.samples[1:], strict=False)), 3),
    )
    # Enough closely spaced samples (~16 s of sampling, 650-800 of them) and seen refills that the bound below is
    # not met vacuously.
    assert loads.dense_samples() >= 300, (loads.dense_samples(), len(loads.samples))
    assert len(seen) >= 2, (refills, len(loads.samples))
    # Every burst but one refills within half a request; the slowest within two. A CI box running three test
    # processes on two cores once starved this run's client for a second after one of five bursts (refills 0.09,
    # 0.15, 1.15, 0.09, 0.16 s). Before back-pressure, every burst marked the endpoint down and each refill took
    # several requests, which the log and state assertions above catch as well. Only refills the sampler saw count:
    # a starved sampler's late next sample is not a slow refill.
    *most, slowest = sorted(seen)
    assert max(most) <= REFILL_BOUND_S and slowest <= 2 * REQUEST_S, refills


def test_refill_times_count_only_what_the_sampler_saw() -> None:
    end = EVERY_S  # the first burst's end, opened at 0
    # (a) slots refilled 1.5 s after the burst, sampled every 20 ms: counted, whole (the regression fails the test).
    slow = spaced((0, end, 0.02, 8), (end, end + 1.5, 0.02, 4), (end + 1.5, end + 3, 0.02, SLOTS))
    assert refill_times(slow, 0.0) == [1.5]
    # (b) refilled at once, but the sampler's next sample came a second late: not a refill it saw.
    late = spaced((0, end + 0.02, 0.02, 8), (end + 1.02, end + 3, 0.02, SLOTS))
    assert refill_times(late, 0.0) == [None]
    # A gap that ends before the burst does not hide its refill.
    early = spaced((0, 1, 0.02, 8), (2, end + 0.3, 0.02, 8), (end + 0.3, end + 3, 0.02, SLOTS))
    assert refill_times(early, 0.0) == [0.3]


def test_refusals_do_not_use_the_prompts_attempts(tmp_path: Path, sim) -> None:
    """A queue-full 503 is the server's load, not the prompt's fault: with max_attempts = 1, prompts refused once
    or more are still generated (before, each prompt refused once was rejected: ~40% of them here)."""
    from tests.helpers import write_config

    server = sim(*SIM_FLAGS, "--fail-503", "0.4", "--seed", "5")
    ids = write_prompts(tmp_path / "prompts.jsonl", n=60)
    cfg = write_config(tmp_path, server.url)
    cfg.write_text(cfg.read_text().replace("max_attempts = 4", "max_attempts = 1"))
    result = regen("run", str(cfg), "--no-progress", "--skip-preflight")  # (its probe may be refused too)
    assert result.returncode == 0, result.stderr
    good, bad = assert_exactly_once(tmp_path / "run", ids)
    assert server.stats()["faults"]["503"] >= 15  # many prompts were refused at least once
    assert bad == [] and len(good) == len(ids)
