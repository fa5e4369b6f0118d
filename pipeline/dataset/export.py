"""Export a RUN_DIR as training data: chat rows, ShareGPT rows, or an OpenAI/vLLM batch output file.

The export streams: committed parts are read one record batch at a time and written to output files of at most
`rows_per_file` rows, each built as a hidden temp file and renamed into place, so an interrupted export never leaves
a half-written file that looks complete. Only committed files are read (`*.parquet`, not hidden, not `*.tmp`);
rejected rows are exported only when asked for, into their own `rejects` config with `reason` and `detail`.

Layout of `out`:

    out/README.md                  dataset card (card.py); front matter: config `default` (accepted), `rejects`
    out/regen-config.toml          the run's resolved config, for `regen run regen-config.toml`
    out/data/train-00000.parquet   accepted rows (or .jsonl)
    out/data/rejects-00000.parquet rejected rows, only with include_rejects
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError, InputError, OutputError
from ..schema import BASE_FIELDS, MESSAGE_TYPE, REJECT_FIELDS, to_table
from ..store import id_hash
from ..store.files import damaged_parts, readable_parts
from ..store.scan import duplicated_hashes
from .card import write_card

FORMATS = ("chat", "sharegpt", "openai-batch-output")
FILE_FORMATS = ("parquet", "jsonl")
DATA_DIR = "data"
BATCH_ROWS = 1024

_BASE_NAMES = {f.name for f in BASE_FIELDS} | {f.name for f in REJECT_FIELDS}
_METADATA_FIELDS = [
    pa.field("id", pa.string()),
    pa.field("model", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("reasoning_tokens", pa.int32()),
    pa.field("seed", pa.int64()),
]
_TURN_TYPE = pa.struct([("from", pa.string()), ("value", pa.string())])
_SHAREGPT_ROLES = {"system": "system", "user": "human", "assistant": "gpt", "tool": "observation"}

Row = dict[str, Any]


def assistant_content(reasoning: str | None, answer: str | None, think_open: str, think_close: str) -> str:
    """The assistant turn a trainer sees: the reasoning inside think tags, a blank line, then the answer."""
    return f"{think_open}\n{reasoning or ''}\n{think_close}\n\n{answer or ''}"


def export_run(
    run_dir: Path,
    *,
    format: str,
    out: Path,
    file_format: str = "parquet",
    rows_per_file: int = 100_000,
    think_open: str = "<think>",
    think_close: str = "</think>",
    include_rejects: bool = False,
) -> dict[str, Any]:
    """Write the run's accepted rows (and rejects if asked) in `format` to `out`, plus a dataset card.

    Returns `{format, file_format, files, rows, rejected_rows, data_files, card}`; `files` and `data_files` are
    relative to `out`. Files of an earlier export to the same `out` that this one did not rewrite are removed.
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    if file_format not in FILE_FORMATS:
        raise ConfigError(f"unknown file format {file_format!r}; choose parquet or jsonl")
    if rows_per_file < 1:
        raise ConfigError(f"rows_per_file must be at least 1, got {rows_per_file}")
    if not (run_dir / "shards").is_dir() and not (run_dir / "run.json").is_file():
        raise InputError(f"{run_dir}: not a run directory (no run.json, no shards/)")
    _check_out(run_dir, out)
    if format == "openai-batch-output":
        file_format = "jsonl"  # the batch output format is defined as JSONL
    convert = _Converter(format, think_open, think_close)
    splits = [("train", "shards")] + ([("rejects", "rejects")] if include_rejects else [])
    files: list[Path] = []
    counts: dict[str, int] = {}
    once = _Once(duplicated_hashes(run_dir))
    for split, kind in splits:
        parts = readable_parts(run_dir / kind)
        schema = convert.schema(_keep_fields(parts), rejects=kind == "rejects")
        writer = SplitWriter(out / DATA_DIR, split, file_format, schema, rows_per_file)
        with writer:
            for batch in _batches(parts):
                writer.write(convert.rows(once.first(batch)))
        files += writer.files
        counts[split] = writer.rows
    _remove_stale(out / DATA_DIR, keep=set(files))
    summary: dict[str, Any] = {
        "format": format,
        "file_format": file_format,
        "files": [str(p.relative_to(out)) for p in files],
        "rows": counts["train"],
        "rejected_rows": counts.get("rejects", 0),
        "data_files": {split: f"{DATA_DIR}/{split}-*.{file_format}" for split, _ in splits if counts[split]},
        "damaged": [str(d) for d in damaged_parts(run_dir)],
        "duplicates_skipped": once.skipped,
    }
    summary["card"] = str(write_card(run_dir, out, summary))
    return summary


def _check_out(run_dir: Path, out: Path) -> None:
    """`out` is a folder (or not there yet) outside every run directory: an export never writes into a run."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: an existing file; the export writes a folder (README.md, data/), name a new one")
    target, run = out.resolve(), run_dir.resolve()
    for folder in (target, *target.parents):
        if folder == run or (folder / "run.json").is_file():
            raise OutputError(f"{out}: inside the run directory {folder}; export to a folder outside it")


def _keep_fields(parts: list[Path]) -> list[str]:
    if not parts:
        return []
    return [n for n in pq.read_schema(parts[0]).names if n not in _BASE_NAMES]


def _batches(parts: list[Path]) -> Iterator[list[Row]]:
    for path in parts:
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
                yield batch.to_pylist()
        except FileNotFoundError:
            raise InputError(f"{path}: vanished during export (is a merge running?); export again") from None


class _Once:
    """Lets each id through once: a committed id in two files (before a resume settles it) is exported from the
    first file only, shards before rejects. Costs nothing per row when the run has no duplicate."""

    def __init__(self, duplicated: np.ndarray) -> None:
        self.duplicated = duplicated
        self.seen: set[str] = set()
        self.skipped = 0

    def first(self, rows: list[Row]) -> list[Row]:
        if len(self.duplicated) == 0:
            return rows
        kept = []
        for row in rows:
            if row["id"] in self.seen:
                self.skipped += 1
                continue
            if np.isin(id_hash(row["id"]), self.duplicated):
                self.seen.add(row["id"])
            kept.append(row)
        return kept


class _Converter:
    """Turns shard rows into rows of one export format."""

    def __init__(self, format: str, think_open: str, think_close: str) -> None:
        self.format = format
        self.think_open = think_open
        self.think_close = think_close
        self._row: Callable[[Row], Row] = {
            "chat": self._chat,
            "sharegpt": self._sharegpt,
            "openai-batch-output": self._batch_output,
        }[format]
        self._keep: list[str] = []
        self._rejects = False

    def schema(self, keep_fields: list[str], *, rejects: bool) -> pa.Schema | None:
        """The output schema for parquet (None for the batch format, whose lines are built as JSON)."""
        self._keep, self._rejects = keep_fields, rejects
        if self.format == "openai-batch-output":
            return None
        body = pa.field("messages", pa.list_(MESSAGE_TYPE))
        if self.format == "sharegpt":
            body = pa.field("conversations", pa.list_(_TURN_TYPE))
        extra = [pa.field(name, pa.string()) for name in keep_fields]
        return pa.schema(
            [_METADATA_FIELDS[0], body, *_METADATA_FIELDS[1:], *(REJECT_FIELDS if rejects else ()), *extra]
        )

    def rows(self, batch: list[Row]) -> list[Row]:
        return [self._row(row) for row in batch]

    def _content(self, row: Row) -> str:
        return assistant_content(row.get("reasoning"), row.get("answer"), self.think_open, self.think_close)

    def _metadata(self, row: Row) -> Row:
        names = [f.name for f in _METADATA_FIELDS] + self._keep
        if self._rejects:
            names += ["reason", "detail"]
        return {name: row.get(name) for name in names}

    def _chat(self, row: Row) -> Row:
        messages = [*(row.get("messages") or []), {"role": "assistant", "content": self._content(row)}]
        return {**self._metadata(row), "messages": messages}

    def _sharegpt(self, row: Row) -> Row:
        turns = [
            {"from": _SHAREGPT_ROLES.get(m["role"], m["role"]), "value": m["content"]} for m in row["messages"] or []
        ]
        turns.append({"from": "gpt", "value": self._content(row)})
        return {**self._metadata(row), "conversations": turns}

    def _batch_output(self, row: Row) -> Row:
        return batch_output_line(row, rejected=self._rejects)


def batch_output_line(row: Row, *, rejected: bool = False) -> Row:
    """One line of an OpenAI/vLLM batch output file for a shard row; `custom_id` is the regen id.

    Line and request ids are derived from the regen id, so exporting twice gives identical files. A rejected row
    carries `error: {code: reason, message: detail}`, and a `response` only if a completion was received.
    """
    digest = hashlib.sha256(row["id"].encode()).hexdigest()
    has_completion = row.get("finish_reason") is not None or row.get("answer") is not None
    response = None
    if not rejected or has_completion:
        response = {"status_code": 200, "request_id": f"regen-req-{digest[:24]}", "body": _completion_body(row, digest)}
    error = {"code": row.get("reason"), "message": row.get("detail")} if rejected else None
    return {"id": f"regen-batch-{digest[:24]}", "custom_id": row["id"], "response": response, "error": error}


def _completion_body(row: Row, digest: str) -> Row:
    prompt, completion = row.get("prompt_tokens"), row.get("completion_tokens")
    usage: Row = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": None}
    if prompt is not None and completion is not None:
        usage["total_tokens"] = prompt + completion
    if row.get("reasoning_tokens") is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": row["reasoning_tokens"]}
    created = row.get("created_at")
    message = {"role": "assistant", "content": row.get("answer"), "reasoning_content": row.get("reasoning")}
    return {
        "id": f"chatcmpl-{digest[:24]}",
        "object": "chat.completion",
        "created": int(created.timestamp()) if created is not None else 0,
        "model": row.get("model"),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": row.get("finish_reason")}],
        "usage": usage,
    }


class SplitWriter:
    """Rows of one split into `{split}-{i:05d}.{ext}` files of at most `rows_per_file` rows, each committed by
    fsync + rename of a hidden temp file. Use as a context manager: an error removes the temp file in progress."""

    def __init__(
        self, folder: Path, split: str, file_format: str, schema: pa.Schema | None, rows_per_file: int
    ) -> None:
        self.folder, self.split, self.file_format = folder, split, file_format
        self.schema, self.rows_per_file = schema, rows_per_file
        self.files: list[Path] = []
        self.rows = 0
        self._in_file = 0
        self._tmp: Path | None = None
        self._parquet: pq.ParquetWriter | None = None
        self._jsonl: IO[bytes] | None = None

    def write(self, rows: list[Row]) -> None:
        while rows:
            if self._tmp is None:
                self._open()
            room = self.rows_per_file - self._in_file
            chunk, rows = rows[:room], rows[room:]
            self._write_chunk(chunk)
            self._in_file += len(chunk)
            self.rows += len(chunk)
            if self._in_file == self.rows_per_file:
                self._commit()

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            if self._tmp is not None:
                self._commit()
            return
        self._close_handles()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)

    def _final_path(self) -> Path:
        return self.folder / f"{self.split}-{len(self.files):05d}.{self.file_format}"

    def _open(self) -> None:
        self._tmp = self.folder / f".{self._final_path().name}.tmp"
        self._in_file = 0
        with _output_errors(self._tmp, "create"):
            self.folder.mkdir(parents=True, exist_ok=True)
            if self.file_format == "jsonl":
                self._jsonl = self._tmp.open("wb")
            else:
                assert self.schema is not None
                self._parquet = pq.ParquetWriter(self._tmp, self.schema, compression="zstd")

    def _write_chunk(self, rows: list[Row]) -> None:
        with _output_errors(self._tmp, "write"):
            if self._jsonl is not None:
                self._jsonl.write(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
            elif self._parquet is not None and self.schema is not None:
                self._parquet.write_table(to_table(rows, self.schema), row_group_size=len(rows))

    def _commit(self) -> None:
        assert self._tmp is not None
        final = self._final_path()
        with _output_errors(final, "commit"):
            self._close_handles()
            fd = os.open(self._tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._tmp, final)
        self.files.append(final)
        self._tmp = None

    def _close_handles(self) -> None:
        if self._jsonl is not None:
            handle, self._jsonl = self._jsonl, None
            handle.close()
        if self._parquet is not None:
            writer, self._parquet = self._parquet, None
            writer.close()


def _remove_stale(folder: Path, keep: set[Path]) -> None:
    """Delete data files of an earlier export that this export did not rewrite (fewer files, other format)."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        is_ours = path.name.startswith(("train-", "rejects-")) and path.suffix in (".parquet", ".jsonl")
        if is_ours and path not in keep:
            with _output_errors(path, "remove the stale export file"):
                path.unlink()


@contextmanager
def _output_errors(path: Path | None, action: str) -> Iterator[None]:
    """OSError → OutputError naming the path and the action."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot {action} {path}: {exc.strerror or exc}") from exc
