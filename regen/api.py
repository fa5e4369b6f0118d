"""regen as a library: what the command line does, for a notebook or a script (`import regen`). The command line
and this API call the same `pipeline` functions; this module only adapts their arguments.

    import regen

    summary = regen.run({"input": {"path": "prompts.jsonl"}, "output": {"dir": "runs/a"},
                         "endpoints": [{"url": "http://gpu-node-01:30000"}]})
    print(summary.metrics["accepted"], summary.metrics["rejected_by_reason"])
    report = regen.audit("broken.jsonl")                 # which rows fail, by reason
    regen.export("runs/a", "chat", "exports/chat")       # training data and a dataset card
    for row in regen.rows("runs/a"): ...                 # the accepted rows, streamed part by part
    ds = regen.dataset("runs/a")                         # the same as a `datasets.Dataset`

A config is a TOML path, a dict of the same shape (checked as strictly: a misspelled key is a ConfigError naming
it), or a `Config`; `overrides` are `--set` items ("generation.max_tokens=4096"). Errors are the command line's
(`regen.RegenError` and its tree, each with its exit code). `run` works inside a running event loop (Jupyter): it
then runs in a thread of its own, without signal handlers (interrupt the kernel to stop: prompts in flight stay
pending, as after a crash).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow.parquet as pq

from pipeline.config import (
    Config,
    apply_override,
    check_api_keys,
    check_endpoints,
    config_from_dict,
    load_config,
    with_endpoints,
)
from pipeline.store.files import committed_parts
from pipeline.store.layout import REJECTS, SHARDS

if TYPE_CHECKING:
    from pipeline.inspection.status import RunStatus

ConfigLike = str | Path | Mapping[str, Any] | Config
T = TypeVar("T")


def load(config: ConfigLike | None = None, overrides: Sequence[str] = ()) -> Config:
    """A Config from a TOML path, a dict or a Config (defaults when None), with `--set` style overrides."""
    if isinstance(config, Config):
        if overrides:
            raise ValueError("overrides apply to a path or a dict, not to a Config object")
        return config
    if isinstance(config, Mapping):
        data = _plain_copy(config)
        for item in overrides:
            apply_override(data, item)
        return config_from_dict(data, "<dict>")
    return load_config(config, overrides)


def _plain_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_copy(v) for v in value]
    return value


def run(
    config: ConfigLike,
    *,
    overrides: Sequence[str] = (),
    endpoints: Sequence[str] = (),
    input: str | None = None,
    limit: int | None = None,
    worker_index: int = 0,
    num_workers: int = 1,
    retry_rejects: bool = False,
    skip_preflight: bool = False,
) -> Any:
    """`regen run`: generate (or resume) and return the RunSummary (`.metrics` holds the counts the command prints;
    `.run_dir`). Raises `regen.Interrupted` (with `.summary`) when stopped, other RegenErrors as the command exits."""
    from pipeline import run as run_config  # the facade: it serves `url = "sim"` with the embedded simulator
    from pipeline.engine.runner import RunOptions

    cfg = with_endpoints(load(config, overrides), endpoints)
    check_endpoints(cfg)
    check_api_keys(cfg)
    main = threading.current_thread() is threading.main_thread() and not _loop_running()
    options = RunOptions(
        worker_index=worker_index,
        num_workers=num_workers,
        limit=limit,
        retry_rejects=retry_rejects,
        skip_preflight=skip_preflight,
        input_path=input,
        handle_signals=main,
    )
    return _outside_a_loop(lambda: run_config(cfg, options))


def preflight(config: ConfigLike, *, overrides: Sequence[str] = (), endpoints: Sequence[str] = ()) -> dict[str, Any]:
    """`regen preflight --json`: {ok, endpoints: [{url, ok, checks, info}]}."""
    from pipeline import preflight as preflight_config  # the facade, as `run` above

    cfg = with_endpoints(load(config, overrides), endpoints)
    check_endpoints(cfg)
    result: dict[str, Any] = _outside_a_loop(lambda: asyncio.run(preflight_config(cfg, urls=list(endpoints) or None)))
    return result


def audit(path: str | Path, *, config: ConfigLike | None = None, ids_out: str | Path | None = None) -> dict[str, Any]:
    """`regen audit PATH --json`: {rows, assistant_turns, failing_rows, by_reason, ...}."""
    from pipeline.dataset.audit import audit_dataset
    from pipeline.inputs.row_audit import AuditOptions

    opts = AuditOptions.from_config(load(config))
    return audit_dataset(str(path), opts, ids_out=Path(ids_out) if ids_out else None)


def export(run_dir: str | Path, format: str, out: str | Path, **options: Any) -> dict[str, Any]:
    """`regen export RUN_DIR --format FORMAT --out OUT`: {files, rows, card, ...} (`repaired`: its report).
    `options` are the fields of the format's options record (pipeline/dataset/exporters.py): `reasoning=`,
    `expand_turns=`, `tokenizer=`, `include_rejects=`, ... (ExportOptions), `original=`, `on_reject=` for
    `repaired` (RepairOptions); one that only another format takes is left to it, one no format takes is a
    TypeError."""
    from pipeline.dataset.exporters import exporter_for, option_names

    run = _existing(run_dir)
    unknown = sorted(set(options) - option_names())
    if unknown:
        raise TypeError(f"export() got an unexpected keyword argument {unknown[0]!r}")
    exporter = exporter_for(format)
    return exporter.export(run, Path(out), exporter.options_from(options))


def status(run_dir: str | Path) -> RunStatus:
    """`regen status --json`."""
    from pipeline.inspection import run_status

    return run_status(_existing(run_dir))


def inspect(run_dir: str | Path, **options: Any) -> dict[str, Any]:
    """`regen inspect --json` (`sample=`, `seed=`, `shard=`, `reason=`, `endpoint=`, `where=`)."""
    from pipeline.inspection import inspect_run

    return inspect_run(_existing(run_dir), **options)


def validate(run_dir: str | Path, *, quarantine: bool = False) -> dict[str, Any]:
    """`regen validate --json` (`quarantine=True` moves failing rows to rejects)."""
    from pipeline.inspection import validate_run

    return validate_run(_existing(run_dir), quarantine=quarantine)


def rows(
    run_dir: str | Path, *, rejects: bool = False, columns: Sequence[str] | None = None
) -> Iterator[dict[str, Any]]:
    """The committed rows of a run (shards, or rejects), part by part and row group by row group: memory stays
    flat whatever the run's size. Rows still in the journals are not committed yet (`inspect` shows them)."""
    folder = _existing(run_dir) / (REJECTS if rejects else SHARDS)
    for path in committed_parts(folder):
        pfile = pq.ParquetFile(path)
        for group in range(pfile.num_row_groups):
            yield from pfile.read_row_group(group, columns=list(columns) if columns else None).to_pylist()


def dataset(run_dir: str | Path, *, rejects: bool = False) -> Any:
    """The committed rows as a `datasets.Dataset` (what `load_dataset("parquet", data_files=...)` gives)."""
    import datasets

    folder = _existing(run_dir) / (REJECTS if rejects else SHARDS)
    files = [str(p) for p in committed_parts(folder)]
    if not files:
        raise FileNotFoundError(f"{folder}: no committed part yet")
    return datasets.load_dataset("parquet", data_files=files, split="train")


def _existing(run_dir: str | Path) -> Path:
    from pipeline.errors import InputError

    path = Path(run_dir)
    if not path.is_dir():
        raise InputError(f"{path}: no such RUN_DIR")
    return path


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _outside_a_loop(fn: Any) -> Any:
    """`fn()` here, or in a thread of its own when this thread runs an event loop (a notebook's)."""
    if not _loop_running():
        return fn()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="regen") as pool:
        return pool.submit(fn).result()
