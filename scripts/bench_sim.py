"""Completions/s the simulator serves on one core: small non-streaming chat completions, instant generation.

The simulator runs in this process (one event loop, one core); the load comes from a bare aiohttp client loop in a
separate process, so the figure is the server's cost, not the client's.

    python3 scripts/bench_sim.py [--seconds 5] [--concurrency 64] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
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


async def _bench(args: argparse.Namespace) -> float:
    async with serve(SimConfig(reasoning_parser="qwen3")) as url:
        ctx = multiprocessing.get_context("spawn")
        out: multiprocessing.Queue = ctx.Queue()
        proc = ctx.Process(target=_client_process, args=(url, args.seconds, args.concurrency, args.max_tokens, out))
        proc.start()
        started, cpu0 = time.perf_counter(), time.process_time()
        # keep serving on this loop while the client process runs
        await asyncio.get_running_loop().run_in_executor(None, proc.join)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
        done, errors = out.get()
    rate = done / args.seconds
    print(f"{done} completions in {args.seconds:.1f} s ({elapsed:.1f} s wall incl. client start): {rate:,.0f}/s")
    print(f"server CPU {cpu:.2f} s: {1e6 * cpu / max(done, 1):.0f} µs per completion, {done / cpu:,.0f}/s per core")
    if errors:
        print(f"{errors} non-200 responses")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=16)
    asyncio.run(_bench(parser.parse_args()))


if __name__ == "__main__":
    main()
