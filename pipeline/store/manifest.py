"""RUN_DIR/run.json: schema version, config hash, resolved config, input fingerprint, counts, history.

Written atomically (temp file, fsync, rename); for a run in a bucket, then copied up (`remote`). Every update is
a read-modify-write under `locks/run-json.lock` (`updating_manifest`), so workers that start or finish at the same
moment each keep their entry (`counts.worker-N`, `history`); across the nodes of a run in a bucket the last copy
up still wins. A resume whose generation config differs from the recorded one is refused with the differing keys
unless the caller allows it, and then the change is recorded in `history`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict, cast

import orjson

from ..config import SIM_URL, Config, ValidateConfig
from ..errors import ConfigDriftError, OutputError
from ..schema import SCHEMA_VERSION
from .durable import output_errors
from .layout import LOCKS, MANIFEST
from .locks import FileLock
from .remote import remote_of


class Manifest(TypedDict, total=False):
    """run.json as read and written: every key may be missing (a run an older regen, or a crash, left), so none is
    required. The nested sections stay open JSON: `config` is `Config.to_dict()`, `generation` its fingerprint,
    `counts` one entry per `worker-N`, `preflight` the slim preflight report."""

    schema_version: int
    started_at: str
    updated_at: str
    config_hash: str
    generation: dict[str, Any]
    config: dict[str, Any]
    input: dict[str, Any]
    history: list[dict[str, Any]]
    counts: dict[str, dict[str, Any]]
    preflight: dict[str, Any]
    simulated: bool
    simulated_endpoints: list[str]
    set_aside: list[dict[str, str]]


def read_manifest(run_dir: Path) -> Manifest | None:
    path = run_dir / MANIFEST
    try:
        return cast(Manifest, dict(orjson.loads(path.read_bytes())))
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OutputError(f"{path}: unreadable manifest: {exc}") from None


def manifest_or_empty(run_dir: Path) -> Manifest:
    """run.json for readers that work without it: {} when absent or unreadable."""
    try:
        data = orjson.loads((run_dir / MANIFEST).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return cast(Manifest, data) if isinstance(data, dict) else {}


def validate_config_of(man: Manifest) -> ValidateConfig:
    """The run's [validate] thresholds from run.json, defaults for anything missing or unknown."""
    section = (man.get("config") or {}).get("validate") or {}
    known = ValidateConfig.__dataclass_fields__
    return ValidateConfig(**{k: v for k, v in section.items() if k in known})


def thinking_of(man: Manifest) -> bool:
    return bool(((man.get("config") or {}).get("generation") or {}).get("thinking", True))


def simulated_endpoints(man: Manifest) -> list[str]:
    """The endpoints of the run that were regen's simulator, [] for a run of real servers only: what the runner
    recorded before its first prompt (`simulated_endpoints`: `sim` as the config names the embedded one, the URL of a
    server preflight found to be `regen sim`), or for a run older than that record, a `url = "sim"` in its config."""
    if "simulated" in man:
        return sorted(str(url) for url in man.get("simulated_endpoints") or [])
    endpoints = (man.get("config") or {}).get("endpoints") or []
    return [SIM_URL] if any(isinstance(ep, dict) and ep.get("url") == SIM_URL for ep in endpoints) else []


def mark_simulated(man: Manifest, endpoints: Iterable[str]) -> None:
    """Record in run.json (inside `updating_manifest`) that `endpoints` were the simulator. Never unmarked: rows a
    simulator wrote stay in the run when a resume talks to real servers, so `simulated` is true from then on."""
    known = set(simulated_endpoints(man)) | set(endpoints)
    man["simulated"] = bool(known)
    man["simulated_endpoints"] = sorted(known)


def record_set_aside(run_dir: Path, moves: list[dict[str, str]]) -> None:
    """Add damaged files that were moved aside to run.json's `set_aside` list (with the time)."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with updating_manifest(run_dir) as current:
        current.setdefault("set_aside", []).extend({"at": at, **m} for m in moves)


@contextmanager
def updating_manifest(run_dir: Path) -> Iterator[Manifest]:
    """run.json as a dict to change in place ({} when there is none yet), written back on a clean exit; one process
    at a time, so concurrent workers never overwrite each other's entries. Nothing is written if the body raises."""
    locks = run_dir / LOCKS
    with output_errors(locks, "create the lock directory"):
        locks.mkdir(parents=True, exist_ok=True)
    lock = FileLock(locks / "run-json.lock")
    lock.acquire(blocking=True, role=MANIFEST)
    try:
        current = read_manifest(run_dir) or {}
        yield current
        write_manifest(run_dir, current)
    finally:
        lock.release()


def write_manifest(run_dir: Path, data: Manifest) -> None:
    path = run_dir / MANIFEST
    tmp = run_dir / f".{MANIFEST}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write manifest: {exc.strerror or exc}") from None
    remote = remote_of(run_dir)
    if remote is not None:  # a run in a bucket: the bucket's run.json is the one other nodes read
        remote.push_manifest()


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: data}


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Keys whose value differs. A key the old run did not know (added in a later regen) counts as its default,
    so a new setting left at its default never blocks a resume."""
    a, b = _flatten(old), _flatten(new)
    defaults = _flatten(Config().generation_fingerprint())
    a.update({k: defaults[k] for k in b.keys() - a.keys() if k in defaults})
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _past_preflight(manifest: Manifest) -> bool:
    """Whether a run of this RUN_DIR may have sent a prompt: the runner records `preflight` (or, at the end, `counts`)
    before its first one. A run stopped by preflight pinned nothing, so its fixed rerun may change the config."""
    return "preflight" in manifest or "counts" in manifest


def begin_run(
    run_dir: Path, cfg: Config, *, input_files: list[str], allow_config_change: bool, extra: dict[str, Any]
) -> Manifest:
    """Create or update run.json for a new invocation; refuse config drift unless allowed."""
    with updating_manifest(run_dir) as current:
        _begin(run_dir, current, cfg, input_files, allow_config_change, extra)
        return current


def _begin(
    run_dir: Path,
    current: Manifest,
    cfg: Config,
    input_files: list[str],
    allow_config_change: bool,
    extra: dict[str, Any],
) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    fingerprint = cfg.generation_fingerprint()
    if not current:
        current.update(Manifest(schema_version=SCHEMA_VERSION, started_at=now, history=[]))
    else:
        diff = config_diff(current.get("generation", {}), fingerprint)
        if diff and not allow_config_change and _past_preflight(current):
            lines = "\n".join(f"  {k}: run has {a!r}, config has {b!r}" for k, a, b in diff)
            raise ConfigDriftError(
                f"{run_dir}: the generation config differs from the one this run was started with:\n{lines}\n"
                "Rerun with the original config, use another --output dir, or pass --allow-config-change "
                "to continue and record the change."
            )
        if diff:
            current["history"].append({"at": now, "config_change": [list(d) for d in diff]})
    current.update(
        Manifest(
            config_hash=cfg.generation_hash(),
            generation=fingerprint,
            config=cfg.to_dict(),
            input={"files": input_files, **extra.pop("input", {})},
            updated_at=now,
        )
    )
    current["history"].append({"at": now, "event": "start", "host": socket.gethostname(), "pid": os.getpid(), **extra})
    current["history"] = current["history"][-200:]
