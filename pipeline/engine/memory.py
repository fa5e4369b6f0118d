"""Process-level settings for a long `regen run`: memory knobs so its RSS stays flat and small, the cyclic garbage
collector's pace, and the event loop.

Measured on 1,800-token completions at ~1,800 completions/s (scripts/bench.py overhead): at the peak only ~32 MB
of live Python objects, yet ~250 MB of RSS. The difference was memory the allocators kept after it was freed:
mimalloc's pool under pyarrow, and glibc's heap, whose mmap threshold grows with every large free so later
large buffers (response bodies, journal writes, Arrow columns) stay in the heap. With both of Arrow's default pools
on jemalloc (`_import_pyarrow_with_run_pools`; off Linux, whose pyarrow wheels have none, on the system
allocator), glibc's threshold pinned (so it no longer grows) and the heap's free pages given back every
TRIM_INTERVAL_S, a run at ~5,400 completions/s peaks at ~135 MB.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
# Pinned at 4 MiB, not at the 16 KiB it was first pinned at: each buffer above the threshold is a fresh mapping whose
# pages fault in zeroed, and a row group's writes make many of 0.1-4 MB (zstd's context for every page it compresses,
# Arrow's column and page buffers): 3-8% of a run's CPU in A/B runs (BENCHMARKS.md "Fourth pass"), for 8-20 MB more
# peak RSS at ~4,500 completions/s (none that a 4-minute soak at real durations could tell).
# What a pinned threshold prevents is glibc raising it to 32 MB after large frees, and malloc_trim gives back
# free pages below it.
MMAP_THRESHOLD = 4 * 1024 * 1024
TRIM_INTERVAL_S = 5.0
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
# jemalloc is in pyarrow's Linux wheels (macOS and Windows wheels have mimalloc and the system allocator only).
ARROW_POOL = "jemalloc" if sys.platform.startswith("linux") else "system"
# The cyclic collector runs a young collection each time this many more container objects were allocated than freed
# (CPython's default: 700; 2,000 from 3.13). A run allocates a few dozen per request (aiohttp's request and response
# objects, the rows), nearly all freed by reference counting; at 700 the collector ran ~1,800 times in a 20,000-
# request run and took ~11% of its CPU (0.6 of 5.5 CPU-s, its older generations most of that, as each of them walks
# everything the run holds). At 10,000 it took 0.05-0.11 CPU-s; at 50,000 0.015 (timed with gc.callbacks, ~1% of
# the run). The garbage cycles a request leaves (few) wait a little longer: a few MB at most.
GC_THRESHOLD0 = 50_000


class _Unused:
    """An import hook that makes importing `modules` (and their submodules) fail, as if they were not installed."""

    def __init__(self, modules: tuple[str, ...]):
        self.modules = modules

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if any(name == m or name.startswith(m + ".") for m in self.modules):
            raise ModuleNotFoundError(f"{name} is not used by `regen run` (import blocked)")


# pyarrow imports pandas on its first list-to-array conversion just to check for pandas types: ~1 s and ~60 MB of
# RSS that a run never uses. httpx needs no block: nothing in pipeline/ imports it (every request regen sends,
# preflight's included, goes through aiohttp; httpx is a test and benchmark dependency only).
UNUSED_IN_RUN = ("pandas",)


@contextmanager
def tuned_for_run() -> Iterator[None]:
    """Around a generation run, early, in a process that will run one (not in a library user's process).

    The import block and the collector's pace are put back on the way out: `regen run` called in-process (tests,
    notebooks) must not leave an interpreter where `datasets` cannot import pandas. The allocator settings and the
    loop policy stay."""
    block = _Unused(tuple(m for m in UNUSED_IN_RUN if m not in sys.modules))
    sys.meta_path.insert(0, block)
    thresholds = gc.get_threshold()
    try:
        _tune()
        gc.set_threshold(max(GC_THRESHOLD0, thresholds[0]), *thresholds[1:])
        yield
    finally:
        gc.set_threshold(*thresholds)
        if block in sys.meta_path:
            sys.meta_path.remove(block)


def _tune() -> None:
    _import_pyarrow_with_run_pools()
    use_uvloop()
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _import_pyarrow_with_run_pools() -> None:
    """Load pyarrow with both of its default memory pools on jemalloc (ARROW_POOL; libarrow's only if this call is
    what loads it, and unless the user chose a pool in ARROW_DEFAULT_MEMORY_POOL).

    `pa.set_memory_pool` moves only pyarrow's own default; libarrow's (what the Parquet writer allocates its page and
    compression buffers from, ~600 allocations and 4.5 MB per 512-row group) is chosen once, from
    ARROW_DEFAULT_MEMORY_POOL, while pyarrow loads, and is mimalloc otherwise. mimalloc keeps what it frees and asks
    for transparent huge pages, each zeroed at its first touch: with it, a 20,000-completion run spent ~14% of its
    CPU zeroing pages in its first seconds and peaked 30 MB higher. On the system allocator instead, every growth of
    an Arrow buffer is a copy (Arrow's buffers are 64-byte aligned, which glibc's realloc cannot keep), and the
    Parquet writer grows its page and encoder buffers value by value: jemalloc grows them in place, which took the
    Parquet writes from 0.75 to 0.55 CPU-s per 20,000 completions and the run's peak RSS ~10 MB lower (BENCHMARKS.md
    "Fifth pass"). jemalloc gives freed pages back on its own within seconds. The variable is set only while
    pyarrow loads, so child processes do not inherit it."""
    chosen = os.environ.get(ARROW_POOL_ENV)
    if "pyarrow" not in sys.modules and chosen is None:
        os.environ[ARROW_POOL_ENV] = ARROW_POOL
        try:
            import pyarrow  # noqa: F401 (loads libarrow, which reads the variable)
        finally:
            del os.environ[ARROW_POOL_ENV]
    import pyarrow as pa

    if chosen is None:  # pyarrow's own default too (pyarrow may have been loaded before this call)
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool() if ARROW_POOL == "jemalloc" else pa.system_memory_pool())
        except NotImplementedError:  # a pyarrow built without jemalloc
            pa.set_memory_pool(pa.system_memory_pool())


def use_run_pools() -> None:
    """The run's Arrow pools (jemalloc) for a command that reads a run's files (status, inspect, validate, audit,
    export, merge), in its own process. On mimalloc, what Arrow frees while those commands decode row groups stays
    cached per thread: `regen inspect --json` of a 902K-row seed run peaked at 282-318 MB from one try to the next
    on mimalloc and at 216-219 MB on jemalloc; `export --format tokenized` of 20K rows 619 -> 516 MB."""
    _import_pyarrow_with_run_pools()


def return_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim; nothing elsewhere).

    glibc keeps what a process frees below the top of its heap: 100 MB of 1 KB objects freed but for one in a
    hundred still count as ~115 MB of RSS until a trim, then ~19 MB (~12 ms for that trim). Called every
    TRIM_INTERVAL_S in a run, so a day-long run's RSS follows what it holds, not the most it ever held (a burst of
    retries, one endpoint's requests moved at once)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


async def keep_returning_free_memory(interval_s: float = TRIM_INTERVAL_S) -> None:
    """`return_free_memory` every `interval_s` for the length of a run (until cancelled)."""
    while True:
        await asyncio.sleep(interval_s)
        return_free_memory()


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not (sys.platform.startswith("linux") and name):
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (not glibc: no such symbols)
    except (OSError, AttributeError):
        return None
    return libc


def use_uvloop() -> bool:
    """Run the process's event loops on uvloop where it is installed (a dependency on Linux and macOS).

    Measured with `scripts/bench.py --only overhead` (1,800-token completions from an instant simulator, 128 in
    flight): the client's CPU per completion 0.578 → 0.501 CPU-s / 1,000 (-13%), the event loop's own scheduling and
    socket work being most of what regen does per request besides its HTTP client. Behaviour is the same: the
    transport's protocols, `asyncio.to_thread`, signal handlers and `asyncio.timeout` run unchanged on it."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True
