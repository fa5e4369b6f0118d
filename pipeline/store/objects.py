"""Object storage for runs that live in a bucket: the few operations the store needs, and their errors.

`Objects` is the protocol (put, conditional put, get, list, upload, download, delete); `S3Objects` implements it on
boto3, which reads credentials and the endpoint from the usual places (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `AWS_PROFILE`, `AWS_ENDPOINT_URL`, `AWS_REGION`, instance roles): regen never reads them
itself, never takes them from the config file and never writes them anywhere. botocore errors become ours in
exactly one place (`_translated`): a missing bucket, refused credentials or an unreachable endpoint is an
OutputError naming the URI (exit 2); a failed condition (`If-None-Match`/`If-Match`) is `ConditionFailed`, which
the commit log and the leases use to decide who won.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from ..errors import ConfigError, OutputError

_URI = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$")
# Path("s3://b/x") is PosixPath("s3:/b/x"): a URI that went through argparse's type=Path comes back this way.
_FOLDED = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]+):/(?!/)(?P<rest>.+)$")
OBJECT_SCHEMES = ("s3",)  # output.dir schemes with a commit protocol (conditional writes)


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
    def delete(self, keys: list[str]) -> None: ...


class S3Objects:
    """`Objects` on S3 or an S3-compatible server, through boto3 (credentials and endpoint from the environment)."""

    def __init__(self, uri: Uri, client: Any = None) -> None:
        self.uri = uri
        self._client = client if client is not None else _client(uri)

    def check(self) -> None:
        """OutputError naming the URI if the bucket is missing, the credentials are refused or nobody answers."""
        with self._translated(str(self.uri), "reach the bucket of"):
            self._client.head_bucket(Bucket=self.uri.bucket)

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        """Write `data` at `key`; with `if_none_match` only if `key` does not exist, with `if_match` only if its
        ETag is still that one (else ConditionFailed). Returns the new ETag."""
        extra: dict[str, str] = {"IfNoneMatch": "*"} if if_none_match else {}
        if if_match is not None:
            extra["IfMatch"] = if_match
        with self._translated(self.uri.of(key), "write"):
            reply = self._client.put_object(Bucket=self.uri.bucket, Key=key, Body=data, **extra)
        return str(reply.get("ETag", ""))

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None if there is no such key."""
        with self._translated(self.uri.of(key), "read"):
            try:
                reply = self._client.get_object(Bucket=self.uri.bucket, Key=key)
            except self._client.exceptions.NoSuchKey:
                return None
            return reply["Body"].read(), str(reply.get("ETag", ""))

    def listing(self, prefix: str) -> list[Listed]:
        """Every object under `prefix` (key, last-modified, size), sorted by key."""
        found: list[Listed] = []
        with self._translated(self.uri.of(prefix), "list"):
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.uri.bucket, Prefix=prefix)
            for page in pages:
                found += [Listed(o["Key"], o["LastModified"].timestamp(), o["Size"]) for o in page.get("Contents", ())]
        return sorted(found)

    def upload(self, path: Path, key: str) -> None:
        with self._translated(self.uri.of(key), "upload to"):
            self._client.upload_file(str(path), self.uri.bucket, key)

    def download(self, key: str, path: Path) -> None:
        with self._translated(self.uri.of(key), "download"):
            self._client.download_file(self.uri.bucket, key, str(path))

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            with self._translated(self.uri.of(keys[start]), "delete"):
                self._client.delete_objects(Bucket=self.uri.bucket, Delete={"Objects": batch, "Quiet": True})

    @contextmanager
    def _translated(self, where: str, action: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                raise ConditionFailed(where) from None
            raise OutputError(f"cannot {action} {where}: {_reason(code, status, self.uri)}") from None
        except BotoCoreError as exc:
            raise OutputError(f"cannot {action} {where}: {exc}") from None
        except OSError as exc:  # download_file writing the local copy
            raise OutputError(f"cannot {action} {where}: {exc.strerror or exc}") from None


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
    # Explicit timeouts and retries: a slow or flaky endpoint must not hang a commit forever.
    config = BotoConfig(connect_timeout=10, read_timeout=120, retries={"max_attempts": 5, "mode": "standard"})
    return boto3.session.Session().client("s3", config=config)


def objects_for(uri: Uri) -> Objects:
    if uri.scheme != "s3":
        raise ConfigError(
            f"{uri}: output.dir supports local paths and s3:// (S3 or any S3-compatible server); "
            f"{uri.scheme}:// is readable as input only"
        )
    return S3Objects(uri)
