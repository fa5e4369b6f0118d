"""Runs whose output.dir is in object storage (`s3://bucket/run`): a local working copy kept in step with the bucket.

Every part of the store (journal, parts streamed into hidden files, recovery, settle, merge, quarantine, every
reader) works on a local RUN_DIR with rename and flock, unchanged. For a run in a bucket that RUN_DIR is the node's
*working copy*, `{output.journal_dir}/{slug}-{hash}/` (default `~/.cache/regen/runs/`, keyed by the run URI), on
fast local disk; it holds the journal (so a SIGKILL still costs at most ~1 s of completions) and a copy of the
committed parts. The bucket holds what every node agrees on:

    s3://bucket/run/run.json                      the manifest (copied up whenever it is written)
    s3://bucket/run/shards/*.parquet              parts, uploaded under unique names
    s3://bucket/run/rejects/*.parquet
    s3://bucket/run/_regen/log/{n:012d}.json      the commit log: which uploads are committed (`commitlog`)
    s3://bucket/run/_regen/leases/worker-{i}.json one live process per worker index (`lease`); its heartbeat

`pull` makes the working copy's committed parts those of the log (downloads what other nodes committed, deletes
what they removed); `push` commits the copy's changes since the last push as one log record (uploads new or
rewritten parts under fresh keys, removes replaced ones). Both run under `locks/remote.lock`, so workers sharing a
copy on one node take turns. `.remote-state.json` remembers which local file is which committed key, and its size
and mtime when pushed, so a push after a crash adopts an upload its record already committed instead of committing
it twice. A part committed locally but not pushed (a crash between the two) is pushed by the next open on the node;
if the node is lost with it, its rows are pending again, like its journal's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from ..config import OutputConfig
from ..errors import InputError, LockedError
from . import commitlog, lease
from .durable import fsync_dir, output_errors, unlink_quiet
from .files import committed_parts
from .layout import LOCKS, MANIFEST, REJECTS, SHARDS
from .locks import FileLock
from .objects import Objects, Uri, objects_for, parse_uri, uri_text

log = logging.getLogger(__name__)

MARKER = "remote.json"  # in the working copy: {"uri", "remote_sync_s", "lease_s"}; no credential, ever
STATE = ".remote-state.json"
ORPHAN_AGE_S = 3600.0  # an upload uncommitted this long belongs to no live commit (they take seconds)
_PULL_TMP = ".pull-"
_PART_NAME = re.compile(r"^part-w(\d+)-")
_WORKER_LEASE = re.compile(r"worker-(\d+)")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "regen" / "runs"


def working_copy(uri: Uri, journal_dir: str = "") -> Path:
    """The node-local RUN_DIR of the run at `uri`: under `journal_dir` (default the user's cache), keyed by the URI."""
    digest = hashlib.sha256(str(uri).encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{uri.bucket}_{uri.prefix}")[-60:]
    return (Path(journal_dir).expanduser() if journal_dir else cache_root()) / f"{slug}-{digest}"


def prepare_output(
    location: str, *, journal_dir: str = "", remote_sync_s: float = 60.0, lease_s: float = lease.DEFAULT_TTL_S
) -> Path:
    """The RUN_DIR a run writes: `location` itself when local; for a bucket, its working copy, after checking the
    bucket answers (OutputError naming the URI otherwise) and fetching the run's manifest."""
    text = uri_text(location)
    if text is None:
        return Path(location[len("file://") :] if location.lower().startswith("file://") else location)
    uri = parse_uri(text)
    objects = objects_for(uri)
    objects.check()
    copy = working_copy(uri, journal_dir)
    marker = {"uri": str(uri), "remote_sync_s": remote_sync_s, "lease_s": lease_s}
    with output_errors(copy, "create the run's working copy"):
        copy.mkdir(parents=True, exist_ok=True)
        _write_atomic(copy / MARKER, orjson.dumps(marker))
    RemoteRun(copy, uri, objects, marker).fetch_manifest()
    return copy


def output_dir(output: OutputConfig) -> Path:
    """The RUN_DIR `regen run` writes for `output` (see `prepare_output`)."""
    return prepare_output(
        output.dir, journal_dir=output.journal_dir, remote_sync_s=output.remote_sync_s, lease_s=output.lease_s
    )


def local_copy(location: str | Path, *, journal_dir: str = "") -> Path:
    """For readers (status, inspect, validate, export, merge): a local run directory as it is, or a bucket run's
    working copy brought up to date with its committed parts. InputError if there is no run at that URI."""
    text = uri_text(location)
    if text is None:
        return Path(location)
    uri = parse_uri(text)
    copy = working_copy(uri, journal_dir)
    remote = remote_of(copy)
    if remote is None:
        objects = objects_for(uri)
        objects.check()
        with output_errors(copy, "create the run's working copy"):
            copy.mkdir(parents=True, exist_ok=True)
            _write_atomic(copy / MARKER, orjson.dumps({"uri": str(uri)}))
        remote = RemoteRun(copy, uri, objects, {"uri": str(uri)})
    if not remote.fetch_manifest() and remote.pull().n < 0:
        raise InputError(f"{uri}: no run there (no run.json, no committed part)")
    remote.pull()
    return copy


@contextmanager
def bucket_transaction(run_dir: Path, what: str) -> Iterator[None]:
    """For a rewrite of a whole run (merge, quarantine) in a working copy: refuse beside a live worker anywhere,
    hold the bucket's `rewrite` lease, pull first, and push the result as one record. Nothing for a local run."""
    remote = remote_of(run_dir)
    if remote is None:
        yield
        return
    live = {name: holder for name, holder in remote.live_leases().items() if name.startswith("worker-")}
    if live:
        name, holder = next(iter(live.items()))
        raise LockedError(
            f"{remote.uri} is in use: {name} is held by {lease.holder_text(holder)}. "
            f"Wait for the run to finish or stop it, then {what}"
        )
    taken = remote.take_lease("rewrite", role=what)
    try:
        remote.pull()
        yield
        remote.push()
    finally:
        taken.release()


def remote_of(run_dir: Path) -> RemoteRun | None:
    """The bucket behind a working copy, or None for an ordinary local RUN_DIR."""
    try:
        marker = orjson.loads((Path(run_dir) / MARKER).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    uri = parse_uri(marker["uri"])
    return RemoteRun(Path(run_dir), uri, objects_for(uri), marker)


class RemoteRun:
    def __init__(self, copy: Path, uri: Uri, objects: Objects, settings: dict[str, Any]) -> None:
        self.copy = copy
        self.uri = uri
        self.objects = objects
        self.remote_sync_s = float(settings.get("remote_sync_s", 60.0))
        self.lease_s = float(settings.get("lease_s", lease.DEFAULT_TTL_S))

    # -- manifest ------------------------------------------------------------------------------------------------

    def fetch_manifest(self) -> bool:
        """Copy run.json from the bucket into the working copy; False if the bucket has none."""
        got = self.objects.get(self.uri.key(MANIFEST))
        if got is not None:
            with output_errors(self.copy / MANIFEST, "write"):
                _write_atomic(self.copy / MANIFEST, got[0])
        return got is not None

    def push_manifest(self) -> None:
        self.objects.put(self.uri.key(MANIFEST), (self.copy / MANIFEST).read_bytes())

    # -- leases --------------------------------------------------------------------------------------------------

    def take_lease(self, name: str, **note: Any) -> lease.Lease:
        return lease.take(self.objects, name, ttl_s=self.lease_s, **note)

    def try_lease(self, name: str, **note: Any) -> lease.Lease | None:
        taken = lease.Lease(self.objects, name, ttl_s=self.lease_s)
        return taken if taken.acquire(**note) is None else None

    def leases(self) -> dict[str, dict[str, Any]]:
        """Every lease's note by name, held, expired or released: one LIST and one GET per lease."""
        out = {}
        for key, _, _ in self.objects.listing(self.uri.key(lease.LEASES)):
            got = self.objects.get(key)
            if got is not None:
                out[key.rsplit("/", 1)[-1].removesuffix(".json")] = lease.parse_note(got[0])
        return out

    def live_leases(self) -> dict[str, dict[str, Any]]:
        """Leases held now, by name (for refusing a merge beside a live worker)."""
        return {name: holder for name, holder in self.leases().items() if lease.binds(holder)}

    def worker_leases(self) -> dict[int, dict[str, Any]]:
        """Each worker index's lease note (`worker-{i}`), live or not: the workers' heartbeats (heartbeat.py)."""
        found = ((_WORKER_LEASE.fullmatch(name), holder) for name, holder in self.leases().items())
        return {int(m[1]): holder for m, holder in found if m}

    # -- pull / push ---------------------------------------------------------------------------------------------

    def pull(self) -> commitlog.Log:
        """Make the working copy's committed parts exactly the bucket's (keeping local commits not pushed yet)."""
        with self._turn():
            state = self._state()
            known = commitlog.catch_up(self.objects, commitlog.Log.from_json(state.get("log")))
            files: dict[str, dict[str, Any]] = state.setdefault("files", {})
            for rel, entry in list(files.items()):
                if entry["key"] not in known.parts:  # removed by another process: remote wins
                    unlink_quiet(self.copy / rel)
                    del files[rel]
            mine = {e["key"] for e in files.values()}
            for key in sorted(set(known.parts) - mine):
                files[key] = {"key": key, "stamp": self._download(key)}
            for kind in (SHARDS, REJECTS):
                fsync_dir(self.copy / kind)
            state["log"] = known.to_json()
            self._save(state)
            return known

    def push(self) -> int:
        """Commit the working copy's changes since the last push as one log record; returns the parts uploaded."""
        with self._turn():
            state = self._state()
            known = commitlog.catch_up(self.objects, commitlog.Log.from_json(state.get("log")))
            files: dict[str, dict[str, Any]] = state.setdefault("files", {})
            local = {f"{kind}/{p.name}": p for kind in (SHARDS, REJECTS) for p in committed_parts(self.copy / kind)}
            add: dict[str, dict[str, int]] = {}
            remove: list[str] = []
            uploads: dict[str, tuple[str, list[int]]] = {}
            for rel, path in local.items():
                entry, stamp = files.get(rel), _stamp(path)
                if entry is not None and entry["stamp"] == stamp:
                    continue
                key = rel if entry is None else _fresh_key(rel, stamp)
                if entry is not None and entry["key"] in known.parts:
                    remove.append(entry["key"])
                if known.parts.get(key, {}).get("size") != stamp[0]:  # not committed by a push that crashed after
                    rows = pq.ParquetFile(path).metadata.num_rows
                    self.objects.upload(path, self.uri.key(key))
                    add[key] = {"rows": rows, "size": stamp[0]}
                uploads[rel] = (key, stamp)
            for rel, entry in list(files.items()):
                if rel not in local:
                    if entry["key"] in known.parts:
                        remove.append(entry["key"])
                    del files[rel]
            if add or remove:
                commitlog.commit(self.objects, known, add, remove)
                self._delete([self.uri.key(k) for k in remove])
            files.update({rel: {"key": key, "stamp": stamp} for rel, (key, stamp) in uploads.items()})
            state["log"] = known.to_json()
            self._save(state)
            return len(add)

    def clean_orphans(self, workers: set[int]) -> int:
        """Delete uploads no record commits: any of `workers` (whose leases the caller holds) and any old one,
        only when the object carries regen's mark (objects.WRITER_MARK): a file someone else put there, even named
        like a part, is never deleted."""
        known = commitlog.catch_up(self.objects, commitlog.Log.from_json(self._state().get("log")))
        now, orphans = time.time(), []
        for kind in (SHARDS, REJECTS):
            for key, modified, _ in self.objects.listing(self.uri.key(f"{kind}/")):
                rel = key[len(self.uri.key("")) :].lstrip("/") if self.uri.prefix else key
                if rel in known.parts or not rel.endswith(".parquet"):
                    continue
                worker = _PART_NAME.match(rel.rsplit("/", 1)[-1])
                if (worker and int(worker[1]) in workers) or now - modified > ORPHAN_AGE_S:
                    if self.objects.written_by_regen(key):
                        orphans.append(key)
                    else:
                        log.warning("%s: left %s alone: not committed, and not an upload of regen's", self.uri, key)
        self._delete(orphans)
        if orphans:
            log.info("%s: removed %d uncommitted uploads", self.uri, len(orphans), extra={"event": "orphans"})
        return len(orphans)

    # -- helpers -------------------------------------------------------------------------------------------------

    def _download(self, key: str) -> list[int]:
        target = self.copy / key
        tmp = target.with_name(f"{_PULL_TMP}{target.name}.tmp")
        target.parent.mkdir(parents=True, exist_ok=True)
        self.objects.download(self.uri.key(key), tmp)
        with output_errors(target, "write the local copy of"):
            os.replace(tmp, target)
        return _stamp(target)

    def _delete(self, keys: list[str]) -> None:
        try:
            self.objects.delete(keys)
        except Exception as exc:  # committed already; an undeleted object is an orphan the next run removes
            log.warning("%s: could not delete replaced objects: %s", self.uri, exc, extra={"event": "orphans"})

    def _turn(self) -> FileLock:
        (self.copy / LOCKS).mkdir(parents=True, exist_ok=True)
        for kind in (SHARDS, REJECTS):
            folder = self.copy / kind
            folder.mkdir(parents=True, exist_ok=True)
        return FileLock(self.copy / LOCKS / "remote.lock")

    def _state(self) -> dict[str, Any]:
        try:
            data = orjson.loads((self.copy / STATE).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, state: dict[str, Any]) -> None:
        with output_errors(self.copy / STATE, "write"):
            _write_atomic(self.copy / STATE, orjson.dumps(state))


def _stamp(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def _fresh_key(rel: str, stamp: list[int]) -> str:
    """The key of a rewritten part: its name plus 8 hex digits of its stamp, the same after a crash and retry.
    A part name keeps matching `part-w{i}-{seq}-{hex}.parquet`."""
    tag = hashlib.sha256(orjson.dumps(stamp)).hexdigest()[:8]
    stem = rel.removesuffix(".parquet")
    return f"{stem}{tag}.parquet" if re.search(r"-[0-9a-f]+$", stem) else f"{stem}-{tag}.parquet"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
