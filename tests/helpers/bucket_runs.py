"""A run whose input and output are in a bucket (the local S3 server of tests/objectstore.py): `bucket_run_config`
uploads the prompts and writes the run's config with their URIs, `final_view` reads the finished run from the bucket
alone, as another node would."""

from __future__ import annotations

from pathlib import Path

from pipeline.store.remote import local_copy
from tests.helpers import write_config, write_prompts
from tests.objectstore import BUCKET, S3Server

RUN = f"s3://{BUCKET}/runs/e2e"
INPUT = f"s3://{BUCKET}/inputs/prompts.jsonl"


def bucket_run_config(tmp_path: Path, s3: S3Server, url: str, n: int, extra: str = "") -> tuple[Path, list[str]]:
    ids = write_prompts(tmp_path / "prompts.jsonl", n=n)
    s3.client().upload_file(str(tmp_path / "prompts.jsonl"), BUCKET, "inputs/prompts.jsonl")
    cfg = write_config(tmp_path, url, extra=extra)
    text = cfg.read_text().replace(str(tmp_path / "prompts.jsonl"), INPUT).replace(str(tmp_path / "run"), RUN)
    cfg.write_text(text)
    return cfg, ids


def final_view(tmp_path: Path, name: str = "reader") -> Path:
    return local_copy(RUN, journal_dir=str(tmp_path / name))
