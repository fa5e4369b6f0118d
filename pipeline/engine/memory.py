"""Process-level memory settings for a long `regen run`, so its RSS stays flat and small.

Measured on 1,800-token completions at ~1,800 completions/s (scripts/bench.py overhead): at the peak only ~32 MB
of live Python objects, yet ~250 MB of RSS. The difference was memory the allocators kept after it was freed:
mimalloc's pool under pyarrow, and glibc's heap, whose mmap threshold grows with every large free so later
large buffers (response bodies, journal writes, Arrow columns) stay in the heap. With Arrow on the system
allocator and glibc's threshold pinned at 16 KiB, the same run peaks at ~160 MB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
MMAP_THRESHOLD = 16 * 1024


class _NoPandas:
    """An import hook that makes `import pandas` fail, as if it were not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"pandas is not used by `regen run` (import blocked): {name}")


def tune_for_run() -> None:
    """Call once, early, in a process that will run a generation (not in a library user's process)."""
    if "pandas" not in sys.modules:
        # pyarrow imports pandas on its first list-to-array conversion just to check for pandas types: ~1 s and
        # ~60 MB of RSS that a run never uses.
        sys.meta_path.insert(0, _NoPandas())
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    name = ctypes.util.find_library("c")
    if sys.platform.startswith("linux") and name:
        try:
            ctypes.CDLL(name).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        except (OSError, AttributeError):
            pass  # not glibc: keep the defaults
