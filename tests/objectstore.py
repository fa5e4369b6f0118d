"""A real S3-compatible server on 127.0.0.1 for tests (moto in server mode), and the environment that points at it.

Tests skip only if the server cannot start (moto not installed). The credentials are sentinels that tests grep for:
they must never appear in run.json, logs, metrics or exports.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ACCESS_KEY = "AKIAREGENTESTSENTINEL"
SECRET_KEY = "regen-secret-sentinel-0123456789"
BUCKET = "regen-bucket"


@dataclass
class S3Server:
    url: str
    env: dict[str, str]

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", ()))


def serve_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A fresh moto server with one bucket; the environment (also for subprocesses) points at it, and the user's
    cache (working copies of bucket runs, fetched inputs) is under tmp_path."""
    server_mod = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    try:
        server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
    except Exception as exc:  # pragma: no cover - only when the server cannot start here
        pytest.skip(f"cannot start the local S3 server: {exc}")
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # moto keeps its buckets in the process, across servers: start each test from an empty store
    httpx.post(f"{env['AWS_ENDPOINT_URL']}/moto-api/reset", timeout=10).raise_for_status()
    found = S3Server(env["AWS_ENDPOINT_URL"], env)
    found.client().create_bucket(Bucket=BUCKET)
    try:
        yield found
    finally:
        server.stop()


def in_cache(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "regen" / "runs"
