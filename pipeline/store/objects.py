"""Object storage for runs that live in a bucket: the few operations the store needs, and their errors.

`Objects` is the protocol (put, conditional put, get, list, upload, download, delete); `S3Objects` implements it on
boto3, which reads credentials and the endpoint from the usual places (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `AWS_PROFILE`, `AWS_ENDPOINT_URL`, `AWS_REGION`, instance roles): regen never reads them
itself, never takes them from the config file and never writes them anywhere. botocore errors become ours in
exactly one place (`_translated`): a missing bucket or refused credentials is an OutputError naming the URI
(exit 2); an outage (no answer, dropped connections, 5xx) is retried for up to RETRY_WINDOW_S, then
StoreUnavailableError (exit 3); a failed condition (`If-None-Match`/`If-Match`) is `ConditionFailed`, which the
commit log and the leases use to decide who won. Every part regen uploads carries WRITER_MARK in its metadata, so
it never deletes an object that only looks like one of its parts.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from ..errors import ConfigError, OutputError, StoreUnavailableError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_URI = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$")
# Path("s3://b/x") is PosixPath("s3:/b/x"): a URI that went through argparse's type=Path comes back this way.
_FOLDED = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]+):/(?!/)(?P<rest>.+)$")
OBJECT_SCHEMES = ("s3",)  # output.dir schemes with a commit protocol (conditional writes)
RETRY_WINDOW_S = 300.0  # how long a store call rides out an outage before the run stops (exit 3)
_MAX_DELAY_S = 10.0
_TRANSIENT_CODES = frozenset({"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling"})
WRITER_MARK = {"regen-writer": "regen"}  # metadata on every part regen uploads: it deletes no object without it


class Listed(NamedTuple):
    key: str
    modified: float  # epoch seconds
    size: int


class ConditionFailed(Exception):
    """A conditional write lost: the object exists (If-None-Match) or changed (If-Match)."""


@dataclass(frozen=True, slots=True)
class Uri:
    scheme: str
    bucket: str
    prefix: str  # no leading or trailing slash; "" for the bucket's root

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def of(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"


def uri_text(location: str | Path) -> str | None:
    """`location` as a URI (`scheme://...`) if it is one, else None (a local path). `file://` is a local path."""
    text = str(location)
    match = _URI.match(text) or (_FOLDED.match(text) if isinstance(location, Path) else None)
    if match is None or match["scheme"].lower() == "file":
        return None
    return f"{match['scheme'].lower()}://{match['rest']}"


def local_path(location: str) -> str:
    """A local output.dir or input.path as a path: `file:///x` is `/x`."""
    return location[len("file://") :] if location.lower().startswith("file://") else location


def parse_uri(text: str) -> Uri:
    """`scheme://bucket/prefix`; credentials in the URI are refused (they would be written to run.json)."""
    match = _URI.match(text)
    if match is None:
        raise ConfigError(f"{text}: not a URI (scheme://bucket/path)")
    bucket, _, prefix = match["rest"].partition("/")
    if "@" in bucket or ":" in bucket:
        raise ConfigError(
            f"{match['scheme']}://...: credentials or a port in the URI are not accepted (they would be recorded); "
            "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL in the environment instead"
        )
    if not bucket:
        raise ConfigError(f"{text}: no bucket name")
    return Uri(match["scheme"].lower(), bucket, prefix.strip("/"))


class Objects(Protocol):
    """The object-store operations a run needs. Keys are full keys in the bucket."""

    uri: Uri

    def check(self) -> None: ...
    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str: ...
    def get(self, key: str) -> tuple[bytes, str] | None: ...
    def listing(self, prefix: str) -> list[Listed]: ...
    def upload(self, path: Path, key: str) -> None: ...
    def download(self, key: str, path: Path) -> None: ...
    def written_by_regen(self, key: str) -> bool: ...
    def delete(self, keys: list[str]) -> None: ...


class S3Objects:
    """`Objects` on S3 or an S3-compatible server, through boto3 (credentials and endpoint from the environment).

    Every call rides out a transient outage (connections refused, reset or timed out; 5xx, SlowDown): it is
    retried with backoff (0.5 s doubling to 10 s), each retry logged, for up to `retry_window_s` (RETRY_WINDOW_S),
    then StoreUnavailableError (exit 3: try again later). A refusal that no retry changes (no bucket, credentials
    refused) is an OutputError at once. `sleep` and `clock` are seams for tests."""

    def __init__(
        self,
        uri: Uri,
        client: Any = None,
        *,
        retry_window_s: float = RETRY_WINDOW_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uri = uri
        self._client = client if client is not None else _client(uri)
        self.retry_window_s = retry_window_s
        self._sleep = sleep
        self._clock = clock

    def check(self) -> None:
        """OutputError naming the URI if the bucket is missing or the credentials are refused;
        StoreUnavailableError if nobody answers within the retry window."""
        self._call(str(self.uri), "reach the bucket of", lambda: self._client.head_bucket(Bucket=self.uri.bucket))

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        """Write `data` at `key`; with `if_none_match` only if `key` does not exist, with `if_match` only if its
        ETag is still that one (else ConditionFailed). Returns the new ETag."""
        extra: dict[str, str] = {"IfNoneMatch": "*"} if if_none_match else {}
        if if_match is not None:
            extra["IfMatch"] = if_match
        from botocore.exceptions import ClientError

        def put() -> Any:
            try:
                return self._client.put_object(Bucket=self.uri.bucket, Key=key, Body=data, **extra)
            except ClientError as exc:  # If-Match on an object that is gone: its condition failed too
                if if_match is not None and exc.response.get("Error", {}).get("Code") == "NoSuchKey":
                    raise ConditionFailed(self.uri.of(key)) from None
                raise

        reply = self._call(self.uri.of(key), "write", put)
        return str(reply.get("ETag", ""))

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None if there is no such key."""

        def get() -> tuple[bytes, str] | None:
            try:
                reply = self._client.get_object(Bucket=self.uri.bucket, Key=key)
            except self._client.exceptions.NoSuchKey:
                return None
            return reply["Body"].read(), str(reply.get("ETag", ""))

        return self._call(self.uri.of(key), "read", get)

    def listing(self, prefix: str) -> list[Listed]:
        """Every object under `prefix` (key, last-modified, size), sorted by key."""

        def listing() -> list[Listed]:
            found: list[Listed] = []
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.uri.bucket, Prefix=prefix)
            for page in pages:
                found += [Listed(o["Key"], o["LastModified"].timestamp(), o["Size"]) for o in page.get("Contents", ())]
            return sorted(found)

        return self._call(self.uri.of(prefix), "list", listing)

    def upload(self, path: Path, key: str) -> None:
        """Upload a part with one PUT (parts are at most `shard_rows` rows), marked as regen's (WRITER_MARK)."""

        def upload() -> None:
            with path.open("rb") as fh:
                self._client.put_object(Bucket=self.uri.bucket, Key=key, Body=fh, Metadata=WRITER_MARK)

        self._call(self.uri.of(key), "upload to", upload)

    def download(self, key: str, path: Path) -> None:
        def download() -> None:
            body = self._client.get_object(Bucket=self.uri.bucket, Key=key)["Body"]
            with path.open("wb") as fh:
                for chunk in iter(lambda: body.read(1 << 20), b""):
                    fh.write(chunk)

        self._call(self.uri.of(key), "download", download)

    def written_by_regen(self, key: str) -> bool:
        """Whether the object at `key` carries regen's mark (an upload of a part); False if it is gone."""

        from botocore.exceptions import ClientError

        def head() -> bool:
            try:
                meta = self._client.head_object(Bucket=self.uri.bucket, Key=key).get("Metadata", {})
            except ClientError as exc:
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                    return False
                raise
            return all(meta.get(k) == v for k, v in WRITER_MARK.items())

        return self._call(self.uri.of(key), "read", head)

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            delete = functools.partial(
                self._client.delete_objects, Bucket=self.uri.bucket, Delete={"Objects": batch, "Quiet": True}
            )
            self._call(self.uri.of(keys[start]), "delete", delete)

    def _call(self, where: str, action: str, call: Callable[[], _T]) -> _T:
        """`call()`, retried through transient failures for up to the retry window (see the class)."""
        deadline, delay = None, 0.5
        while True:
            try:
                with self._translated(where, action):
                    return call()
            except _Transient as exc:
                now = self._clock()
                deadline = deadline if deadline is not None else now + self.retry_window_s
                if now >= deadline:
                    raise StoreUnavailableError(
                        f"cannot {action} {where}: the object store kept failing for {self.retry_window_s:.0f} s "
                        f"({exc}); stopped. Nothing committed is lost: rerun the same command once it answers"
                    ) from None
                wait = min(delay, deadline - now)
                log.warning(
                    "cannot %s %s (%s); retrying in %.1f s (for up to %.0f s more)",
                    action, where, exc, wait, deadline - now, extra={"event": "store_retry"},
                )  # fmt: skip
                self._sleep(wait)
                delay = min(delay * 2, _MAX_DELAY_S)

    @contextmanager
    def _translated(self, where: str, action: str) -> Iterator[None]:
        """The one place botocore's errors become ours: ConditionFailed, _Transient (retried) or OutputError."""
        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                raise ConditionFailed(where) from None
            if code in _TRANSIENT_CODES or (isinstance(status, int) and status >= 500):
                raise _Transient(f"{code or 'error'} (HTTP {status})") from None
            raise OutputError(f"cannot {action} {where}: {_reason(code, status, self.uri)}") from None
        except (HTTPClientError, BotoConnectionError) as exc:  # refused, reset, timed out, cut mid-body
            raise _Transient(str(exc)) from None
        except BotoCoreError as exc:
            raise OutputError(f"cannot {action} {where}: {exc}") from None
        except OSError as exc:  # reading or writing the local copy
            raise OutputError(f"cannot {action} {where}: {exc.strerror or exc}") from None


class _Transient(Exception):
    """A failure a retry may cure (the store restarting, a dropped connection, throttling); never escapes."""


def _reason(code: str, status: int | None, uri: Uri) -> str:
    if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and status == 404):
        return f"the bucket {uri.bucket!r} does not exist (create it, or check AWS_ENDPOINT_URL)"
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
        return f"access refused ({code}); check the AWS_* credentials in the environment"
    return f"{code or 'error'} (HTTP {status})"


def _client(uri: Uri) -> Any:
    try:
        import boto3
        from botocore.config import Config as BotoConfig
    except ImportError:
        raise ConfigError(f"{uri}: runs in object storage need boto3 (pip install 'regen[s3]')") from None
    # Explicit timeouts. botocore retries once; S3Objects._call rides out longer outages, logged and bounded.
    config = BotoConfig(connect_timeout=10, read_timeout=120, retries={"max_attempts": 2, "mode": "standard"})
    return boto3.session.Session().client("s3", config=config)


def objects_for(uri: Uri) -> Objects:
    if uri.scheme != "s3":
        raise ConfigError(
            f"{uri}: output.dir supports local paths and s3:// (S3 or any S3-compatible server); "
            f"{uri.scheme}:// is readable as input only"
        )
    return S3Objects(uri)
