"""engine/memory.py: the process settings of a run, and what they leave behind in an interpreter that goes on."""

import gc
import importlib
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from pipeline.engine.memory import GC_THRESHOLD0, tuned_for_run


def test_pandas_is_blocked_during_a_run_and_importable_after_it(monkeypatch):
    # as in a fresh `regen run` process, where nothing imported pandas yet
    for name in [n for n in sys.modules if n == "pandas" or n.startswith("pandas.")]:
        monkeypatch.delitem(sys.modules, name)
    hooks = list(sys.meta_path)
    with tuned_for_run():
        with pytest.raises(ModuleNotFoundError, match="not used by `regen run`"):
            importlib.import_module("pandas")
    assert sys.meta_path == hooks  # `regen run` called in-process (tests, a notebook) leaves `datasets` working


def test_the_collector_runs_less_often_during_a_run_and_as_before_after_it() -> None:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's default before 3.13
    try:
        with tuned_for_run():
            assert gc.get_threshold() == (GC_THRESHOLD0, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


FRAGMENTED = """
import os, sys
from pipeline.engine.memory import return_free_memory

def rss_mb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmRSS:"))

objs = [os.urandom(1) * 1000 + bytes(i % 7) for i in range(100_000)]  # ~100 MB of 1 KB objects
keep = objs[::100]  # one in a hundred stays: the heap's top is never free, so free() alone returns nothing
del objs
held = rss_mb()
return_free_memory()
print(held, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim; a no-op elsewhere")
def test_freed_heap_memory_goes_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", FRAGMENTED], capture_output=True, text=True, check=True)
    held, trimmed = map(float, out.stdout.split())
    assert held - trimmed > 50, (held, trimmed)  # ~115 -> ~20 MB here


PARQUET_WRITE = """
import json, os, sys
from pipeline.engine.memory import tuned_for_run

tuned = tuned_for_run() if sys.argv[2] == "run" else None
if tuned is not None:
    tuned.__enter__()
import pyarrow as pa, pyarrow.parquet as pq

if tuned is None:
    pa.set_memory_pool(pa.system_memory_pool())  # what a run did before: pyarrow's own pool only

table = pa.table({"text": ["x" * 7000] * 512})
with pq.ParquetWriter(sys.argv[1], table.schema, compression="zstd") as writer:  # its page and zstd buffers
    writer.write_table(table)
pools = {"mimalloc": pa.mimalloc_memory_pool(), "jemalloc": pa.jemalloc_memory_pool()}
print(json.dumps({
    **{name: pool.num_allocations() for name, pool in pools.items()},
    "pyarrow": pa.default_memory_pool().backend_name,
    "env": os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "-"),
}))
"""


def _parquet_write(tmp_path, how: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"} | (env or {})
    argv = [sys.executable, "-c", PARQUET_WRITE, str(tmp_path / "t.parquet"), how]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=environ)
    assert "Unsupported backend" not in out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_a_run_writes_parquet_on_jemalloc_not_on_arrows_mimalloc(tmp_path) -> None:
    # libarrow's own default pool (the Parquet writer's buffers) is mimalloc unless chosen while pyarrow loads;
    # pa.set_memory_pool alone does not move it
    plain = _parquet_write(tmp_path, "plain")
    assert plain["mimalloc"] > 0 and plain["jemalloc"] == 0
    run = _parquet_write(tmp_path, "run")
    assert run["mimalloc"] == 0 and run["jemalloc"] > 0  # the writer's buffers grow in place, not by copies
    assert run["pyarrow"] == "jemalloc" and run["env"] == "-"  # and the variable is not left for child processes


@pytest.mark.parametrize("pool", ["mimalloc", "system"])
def test_a_pool_the_user_chose_is_kept(tmp_path, pool: str) -> None:
    run = _parquet_write(tmp_path, "run", {"ARROW_DEFAULT_MEMORY_POOL": pool})
    assert run["pyarrow"] == pool and run["env"] == pool and run["jemalloc"] == 0
    assert (run["mimalloc"] > 0) == (pool == "mimalloc")


def test_the_command_line_leaves_pyarrow_unloaded_until_the_run_tunes_it() -> None:
    # the pool is chosen while pyarrow loads: `regen run` must reach tuned_for_run() before anything imports it
    code = "import sys, pipeline.cli; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


POOL_AFTER_MAIN = """
import os, sys
import pipeline.cli
sys.argv = ["regen", *sys.argv[1:]]
code = pipeline.cli.main() if os.environ.get("HOW") == "process" else pipeline.cli.main(sys.argv[1:])
import pyarrow as pa
print(pa.default_memory_pool().backend_name, os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "-"), code)
"""


@pytest.mark.parametrize("command", ["status", "inspect", "validate", "merge"])
def test_commands_that_read_a_runs_files_use_the_runs_pools_in_their_own_process(tmp_path, command: str) -> None:
    # on mimalloc, `inspect --json` of a 902K-row run peaked 282-318 MB from one try to the next; 216-219 on jemalloc
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    missing = str(tmp_path / "no-such-run")  # the pools are chosen before the command reads anything
    argv = [sys.executable, "-c", POOL_AFTER_MAIN, command, missing]
    own = subprocess.run(argv, capture_output=True, text=True, check=True, env=environ | {"HOW": "process"})
    assert own.stdout.split() == ["jemalloc", "-", "2"], own.stderr
    called = subprocess.run(argv, capture_output=True, text=True, check=True, env=environ | {"HOW": "call"})
    assert called.stdout.split()[0] == "mimalloc"  # a caller's interpreter keeps its pools
