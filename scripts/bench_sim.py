"""Completions/s the simulator serves on one core: small non-streaming chat completions, instant generation.

The simulator runs in this process (one event loop, one core); the load comes from a bare aiohttp client loop in a
separate process, so the figure is the server's cost, not the client's. Each round reports two figures:

- the wall rate (completions / s of load), which is what a client sees, and falls when the machine is busy;
- the server's CPU per completion (process CPU time / completions) and its inverse, completions/s per core: the
  simulator's own cost, which stays meaningful on a loaded machine (the load average is printed alongside).

    python3 scripts/bench_sim.py [--seconds 5] [--concurrency 64] [--max-tokens 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import orjson

from pipeline.sim import SimConfig, serve


async def _client(url: str, seconds: float, concurrency: int, max_tokens: int) -> tuple[int, int]:
    done = errors = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(w: int) -> None:
            nonlocal done, errors
            i = 0
            while time.perf_counter() < deadline:
                body = {
                    "model": "bench",
                    "messages": [{"role": "user", "content": f"question {w}-{i}"}],
                    "max_tokens": max_tokens,
                }
                i += 1
                async with session.post(
                    url + "/v1/chat/completions", data=orjson.dumps(body), headers={"Content-Type": "application/json"}
                ) as response:
                    await response.read()
                    if response.status == 200:
                        done += 1
                    else:
                        errors += 1

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return done, errors


def _client_process(url: str, seconds: float, concurrency: int, max_tokens: int, out: multiprocessing.Queue) -> None:
    out.put(asyncio.run(_client(url, seconds, concurrency, max_tokens)))


async def _round(url: str, args: argparse.Namespace) -> tuple[int, int, float, float]:
    """One load run: (completions, errors, wall seconds of load, server CPU seconds)."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()
    proc = ctx.Process(target=_client_process, args=(url, args.seconds, args.concurrency, args.max_tokens, out))
    proc.start()
    cpu0 = time.process_time()
    # keep serving on this loop while the client process runs
    await asyncio.get_running_loop().run_in_executor(None, proc.join)
    cpu = time.process_time() - cpu0
    done, errors = out.get()
    return done, errors, args.seconds, cpu


async def _bench(args: argparse.Namespace) -> float:
    walls: list[float] = []
    per_core: list[float] = []
    async with serve(SimConfig(reasoning_parser="qwen3")) as url:
        for i in range(args.rounds):
            load = os.getloadavg()[0]
            done, errors, seconds, cpu = await _round(url, args)
            walls.append(done / seconds)
            per_core.append(done / cpu if cpu else 0.0)
            print(
                f"round {i + 1}: {done} completions in {seconds:.1f} s: wall {walls[-1]:,.0f}/s; "
                f"server CPU {1e6 * cpu / max(done, 1):.0f} µs per completion = {per_core[-1]:,.0f}/s per core "
                f"(load average {load:.1f} on {os.cpu_count()} CPUs)" + (f"; {errors} non-200" if errors else "")
            )
    print(
        f"median of {args.rounds}: wall {statistics.median(walls):,.0f}/s, "
        f"{statistics.median(per_core):,.0f}/s per core of server CPU "
        f"({1e6 / statistics.median(per_core):.0f} µs per completion); "
        f"best round {max(per_core):,.0f}/s per core ({1e6 / max(per_core):.0f} µs)"
    )
    return statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each round of load")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight from the client")
    parser.add_argument("--max-tokens", type=int, default=16, help="max_tokens of each completion")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of load; the median is reported")
    asyncio.run(_bench(parser.parse_args()))


if __name__ == "__main__":
    main()
