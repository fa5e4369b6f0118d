"""Worker leases in object storage: one live process per worker index without flock.

`RUN/_regen/leases/worker-{i}.json` holds `{owner, host, pid, role, taken, since, expires}` (`since`: the last
renewal). A process takes the lease by creating the object (`If-None-Match: *`) or, once the holder's lease has
expired (or its holder was a process of this host that is no longer alive), by replacing it with `If-Match: <its
ETag>`: of two takers one wins. The holder renews it every `ttl/3` with `If-Match` on its own ETag; a renewal that
fails because someone else took the lease, or no renewal for a whole `ttl`, marks the lease lost and the store stops
before its next commit. Release writes an expired lease (the object stays, so its ETag keeps ordering takers) that
still names its last holder.

A worker's lease is also its heartbeat for `regen status` on any node (heartbeat.from_lease): nothing more is
written for it.

Locally the same worker index is still guarded by `locks.FileLock` in the node's copy of the run: a second process
on one node is refused by flock, one on another node by the lease. Both refusals are LockedError (exit 4).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any

import orjson

from ..errors import LeaseLostError, LockedError, OutputError
from .objects import ConditionFailed, Objects

LEASES = "_regen/leases/"
DEFAULT_TTL_S = 60.0


def lease_key(objects: Objects, name: str) -> str:
    return objects.uri.key(f"{LEASES}{name}.json")


class Lease:
    def __init__(self, objects: Objects, name: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.objects = objects
        self.name = name  # "worker-3", "rewrite"
        self.ttl_s = ttl_s
        self.key = lease_key(objects, name)
        self._owner = uuid.uuid4().hex
        self._etag: str | None = None
        self._renewed = 0.0
        self._taken = 0.0
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()
        self._note: tuple[str, dict[str, Any]] = ("worker", {})

    @property
    def held(self) -> bool:
        return self._etag is not None

    def acquire(self, role: str = "worker", **note: Any) -> dict[str, Any] | None:
        """Take the lease; returns None when taken, else the holder's note."""
        got = self.objects.get(self.key)
        self._taken = time.time()
        body = self._body(role, note)
        try:
            if got is None:
                self._etag = self.objects.put(self.key, body, if_none_match=True)
            else:
                holder = parse_note(got[0])
                if binds(holder):
                    return holder
                self._etag = self.objects.put(self.key, body, if_match=got[1])
        except ConditionFailed:
            latest = self.objects.get(self.key)
            return parse_note(latest[0]) if latest else {}
        self._renewed = time.monotonic()
        self._note = (role, note)
        return None

    def keep_alive(self) -> None:
        """Renew the lease in a daemon thread every ttl/3 until `release()`."""
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """LeaseLostError (exit 4) if another process took the lease. One unrenewed for a whole ttl (the store
        was down) is renewed here first: If-Match on its ETag proves nobody took it meanwhile; a store still down
        after the retry window is StoreUnavailableError (exit 3)."""
        if self._lost is None and self.held and time.monotonic() - self._renewed > self.ttl_s:
            self._renew()
        if self._lost is not None:
            raise LeaseLostError(
                f"{self.objects.uri}: lost the lease on {self.name} ({self._lost}); another process may run this "
                "worker now. Stopped before committing more; rerun to resume"
            )

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ttl_s)
        with self._io:
            etag, self._etag = self._etag, None
            if etag is None or self._lost is not None:
                return
            released = orjson.dumps({**self._holder(), "released": True, "since": time.time(), "expires": 0})
            try:
                self.objects.put(self.key, released, if_match=etag)
            except (ConditionFailed, OutputError):
                pass  # lost or unreachable: it expires on its own

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3) and self._lost is None:
            try:
                self._renew()
            except OutputError:
                continue  # the store is unreachable for now: `check` renews (or stops the run) after a whole ttl

    def _renew(self) -> None:
        """Put the lease again with If-Match on its ETag; a lost condition (replaced, or deleted) means lost."""
        with self._io:
            if self._etag is None or self._lost is not None:
                return
            role, note = self._note
            try:
                self._etag = self.objects.put(self.key, self._body(role, note), if_match=self._etag)
                self._renewed = time.monotonic()
            except ConditionFailed:
                self._lost = "another process took it, or the lease object is gone"

    def _body(self, role: str, note: dict[str, Any]) -> bytes:
        now = time.time()
        info = {**self._holder(), "role": role, "taken": self._taken}
        return orjson.dumps({**info, "since": now, "expires": now + self.ttl_s, **note})

    def _holder(self) -> dict[str, Any]:
        return {"owner": self._owner, "host": socket.gethostname(), "pid": os.getpid()}


def parse_note(data: bytes) -> dict[str, Any]:
    try:
        info = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


def binds(holder: dict[str, Any]) -> bool:
    """Whether the lease `holder` wrote still binds: not released, not expired, not a dead process of this host."""
    if holder.get("released") or float(holder.get("expires", 0)) < time.time():
        return False
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return True


def holder_text(holder: dict[str, Any]) -> str:
    try:
        until = time.strftime("%H:%M:%S", time.localtime(float(holder["expires"])))
        return f"pid {holder['pid']} on host {holder['host']} (lease valid until {until} unless renewed)"
    except (KeyError, TypeError, ValueError, OverflowError):
        return "an unknown process"


def take(objects: Objects, name: str, *, ttl_s: float, patience_s: float = 2.0, **note: Any) -> Lease:
    """The lease `name`, renewed in the background, or LockedError naming its holder after `patience_s`."""
    lease = Lease(objects, name, ttl_s=ttl_s)
    start = time.monotonic()
    while (holder := lease.acquire(**note)) is not None:
        if time.monotonic() - start > patience_s:
            raise LockedError(
                f"{name} of {objects.uri} is already running: its lease is held by {holder_text(holder)}. "
                "Stop that process or use another --worker-index (a lease of a lost node expires by itself)"
            )
        time.sleep(0.2)
    lease.keep_alive()
    return lease
