"""Where the input is and how its files are read: resolving `input.path`, and streaming each file format.

`input.path` is a file, a folder, a glob, or a `datasets` save_to_disk folder. JSONL is read line by line (also
gzipped), Parquet one record batch at a time (only the id column when that is all that is asked), Arrow IPC
memory-mapped. Every reader yields lists of `(row number, parsed object)`; a line that cannot be parsed is a
`Broken` value with the reason, so the reader can reject that row and go on.

An `input.path` in object storage (`s3://bucket/data/*.jsonl`, a folder, one file; `gs://` and `hf://` and every
scheme fsspec knows, with its package installed) is copied once into the user's cache (`~/.cache/regen/inputs/`,
fetched again when a file's size changes) and read from there like a local path. S3 credentials and endpoint come
from the environment (`AWS_*`, `AWS_ENDPOINT_URL`), as for output.

A dataset may also be named as on the Hugging Face Hub, `org/name` or `org/name:split` (default `train`), when it
is in the local Hugging Face cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`, as
`huggingface_hub` keeps it): its snapshot of `refs/main` is read as the Hub lays datasets out (`data/<split>-*.parquet`
or `.jsonl`, or files named after the split), streamed like any other file, never loaded whole.
"""

from __future__ import annotations

import fnmatch
import glob
import gzip
import hashlib
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError, RegenError
from ..store import row_groups
from ..store.objects import Uri, local_path, objects_for, parse_uri, uri_text
from ..store.remote import cache_root

_SUFFIXES = {
    "jsonl": (".jsonl", ".jsonl.gz", ".ndjson"),
    "json": (".json",),  # one JSON array of rows (FastChat, LLaMA-Factory), streamed
    "parquet": (".parquet",),
    "arrow": (".arrow",),
}
_KIND_BY_FORMAT = {"jsonl": "jsonl", "openai-batch": "jsonl", "parquet": "parquet", "datasets": "arrow"}
_JSON_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Broken:
    """A row that could not even be parsed (invalid JSON, not UTF-8)."""

    detail: str


Row = tuple[int, Any]  # (row number, parsed object or Broken)


# ---------------------------------------------------------------- resolving paths


def resolve(pattern: str, fmt: str) -> dict[Path, str]:
    """Input files and the reader kind of each (jsonl, parquet, arrow), in reading order."""
    text = uri_text(pattern)
    cached = hub_cached(pattern) if text is None else None
    if cached is not None:
        return cached
    pattern = local_path(pattern) if text is None else fetch_remote(text)
    named = not glob.has_magic(pattern)  # a file named on its own must be readable; glob matches may be skipped
    if not named:
        matches = [Path(m) for m in sorted(glob.glob(pattern, recursive=True))]
        if not matches:
            raise InputError(f"{pattern}: no input files match")
    else:
        matches = [Path(pattern)]
        if not matches[0].exists():
            raise InputError(f"{pattern}: no such file or folder (input path not found)")
    kinds: dict[Path, str] = {}
    for path in matches:
        if path.is_dir():
            kinds.update(_folder(path, fmt))
        elif kind := _kind(path, fmt, named=named):
            kinds[path] = kind
    if not kinds:
        raise InputError(f"{pattern}: no .jsonl, .parquet or .arrow files match")
    return kinds


_HUB_NAME = re.compile(r"^([A-Za-z0-9][\w.-]*)/([A-Za-z0-9][\w.-]*)(?::([\w.-]+))?$")


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub"


def hub_cached(name: str) -> dict[Path, str] | None:
    """The files of dataset `org/name[:split]` in the local Hugging Face cache; None when `name` is a path that
    exists or does not look like a dataset name. InputError when it names a dataset the cache lacks."""
    match = _HUB_NAME.match(name)
    if match is None or Path(name.split(":")[0]).exists() or _local_looking(match[1], match[2]):
        return None
    org, dataset, split = match[1], match[2], match[3] or "train"
    repo = hub_cache() / f"datasets--{org}--{dataset}"
    if not repo.is_dir():
        raise InputError(
            f"{name}: no such file or folder, nor a dataset in the local Hugging Face cache ({repo} is missing)"
        )
    ref = repo / "refs" / "main"
    snapshots = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else []
    snapshots = [s for s in snapshots if s.is_dir()] or sorted(
        (p for p in (repo / "snapshots").glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime
    )
    if not snapshots:
        raise InputError(f"{name}: the Hugging Face cache has no snapshot of it ({repo / 'snapshots'})")
    files = [p for p in sorted(snapshots[-1].rglob("*")) if p.is_file() and _kind(p, "auto", named=False)]
    files = [p for p in files if _kind(p, "auto", named=False) != "json" or _is_json_array(p)]
    chosen = [p for p in files if p.name.startswith(f"{split}-") or p.stem == split or p.parent.name == split]
    if not chosen:
        raise InputError(f"{name}: no {split!r} split in {snapshots[-1]} ({len(files)} data files)")
    return {p: _kind(p, "auto", named=False) for p in chosen}


def _local_looking(first: str, last: str) -> bool:
    """Whether `first/last` reads as a local path rather than a Hub name: a file name with a data suffix
    (`data/chat.jsonl`), or a first part that is a local folder. A missing one is then "no such file"."""
    suffixes = tuple(s for group in _SUFFIXES.values() for s in group)
    return last.lower().endswith((*suffixes, ".gz")) or Path(first).is_dir()


def _kind(path: Path, fmt: str, *, named: bool) -> str:
    """How to read `path` ('' = skip it): by extension, or by `fmt` for a file named on its own."""
    name = path.name.lower()
    by_name = next((kind for kind, suffixes in _SUFFIXES.items() if name.endswith(suffixes)), "")
    if fmt == "auto":
        kind = by_name
    else:
        kind = _KIND_BY_FORMAT[fmt] if named or by_name == _KIND_BY_FORMAT[fmt] else ""
    if named and not kind:
        raise InputError(f"{path}: cannot tell the format from the name; set input.format")
    return kind


def _folder(path: Path, fmt: str) -> dict[Path, str]:
    if (path / "dataset_dict.json").exists():
        splits = sorted(p.name for p in path.iterdir() if (p / "state.json").exists())
        raise InputError(f"{path}: a DatasetDict folder; set input.path to one split ({', '.join(splits)})")
    state = path / "state.json"
    if state.exists() and fmt in ("auto", "datasets"):
        try:
            names = [entry["filename"] for entry in orjson.loads(state.read_bytes())["_data_files"]]
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(f"{state}: not a readable datasets state file: {exc}") from None
        return {path / name: "arrow" for name in names}
    if fmt == "datasets":
        raise InputError(f"{path}: not a datasets save_to_disk folder (no state.json)")
    kinds = {}
    for child in sorted(path.iterdir()):
        if child.is_file() and not child.name.startswith((".", "_")) and (kind := _kind(child, fmt, named=False)):
            if kind != "json" or _is_json_array(child):  # a folder's dataset_info.json is not data
                kinds[child] = kind
    return kinds


def labels(paths: list[Path]) -> dict[Path, str]:
    """The short name of each file used in bad-input ids: its name, or a relative path when names clash."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return dict(zip(paths, names, strict=True))
    root = os.path.commonpath([str(p.absolute()) for p in paths])
    return {p: os.path.relpath(p.absolute(), root) for p in paths}


# ---------------------------------------------------------------- inputs in object storage


def fetch_remote(text: str) -> str:
    """Copy the files `text` names (a file, a folder, a glob) into the local cache; the local pattern to read."""
    try:
        uri = parse_uri(text)
        return _fetch_s3(uri) if uri.scheme == "s3" else _fetch_fsspec(text)
    except InputError:
        raise
    except RegenError as exc:  # the bucket is missing, access refused: an input problem here
        raise InputError(str(exc)) from None


def _local_root(text: str) -> Path:
    return cache_root().parent / "inputs" / hashlib.sha256(text.encode()).hexdigest()[:16]


def _fetch_s3(uri: Uri) -> str:
    objects = objects_for(uri)
    magic = glob.has_magic(uri.prefix)
    base = uri.prefix.split("*")[0].split("?")[0].split("[")[0].rpartition("/")[0] if magic else uri.prefix
    listed = objects.listing(f"{base}/" if base else "")
    exact = [o for o in objects.listing(base) if o.key == base] if not magic and base else []
    if exact:  # one file named on its own
        base = base.rpartition("/")[0]
        listed = exact
    elif magic:
        listed = [o for o in listed if fnmatch.fnmatchcase(o.key, uri.prefix)]
    if not listed:
        raise InputError(f"{uri}: no input files match")
    root = _local_root(f"{uri.bucket}/{base}")
    for item in listed:
        target = root / item.key[len(base) :].lstrip("/")
        if not target.exists() or target.stat().st_size != item.size:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.tmp")
            objects.download(item.key, tmp)
            os.replace(tmp, target)
    if exact:
        return str(root / exact[0].key.rpartition("/")[2])
    return str(root / uri.prefix[len(base) :].lstrip("/")) if magic else str(root)


def _fetch_fsspec(text: str) -> str:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(text)
    except (ImportError, ValueError) as exc:
        raise InputError(
            f"{text}: cannot read this scheme ({exc}); install its fsspec package (gcsfs for gs://)"
        ) from None
    root = _local_root(text)
    try:
        if glob.has_magic(path) or fs.isdir(path):
            pattern = path if glob.has_magic(path) else f"{path.rstrip('/')}/**"
            names = [n for n in fs.glob(pattern) if not fs.isdir(n)]
            base = os.path.commonpath(names) if len(names) > 1 else os.path.dirname(names[0]) if names else path
            for name in names:
                fs.get(name, str(root / os.path.relpath(name, base)))
            return str(root / os.path.relpath(path, base)) if glob.has_magic(path) else str(root)
        fs.get(path, str(root / os.path.basename(path)))
        return str(root / os.path.basename(path))
    except (OSError, ValueError) as exc:
        raise InputError(f"{text}: cannot fetch: {exc}") from None


# ---------------------------------------------------------------- file readers


def jsonl_rows(path: Path, size: int) -> Iterator[list[Row]]:
    """Parsed lines, `size` at a time; blank lines are skipped, a BOM on the first line is ignored."""
    try:
        with gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb") as fh:
            rows: list[Row] = []
            for lineno, line in enumerate(fh, 1):
                if lineno == 1:
                    line = line.removeprefix(b"\xef\xbb\xbf")
                if line.strip():
                    rows.append((lineno, parse_line(line)))
                    if len(rows) == size:
                        yield rows
                        rows = []
            if rows:
                yield rows
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def _is_json_array(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def json_array_rows(path: Path, size: int) -> Iterator[list[Row]]:
    """The elements of a file holding one JSON array, `size` at a time, read in 1 MB chunks (a multi-GB array is
    never in memory whole). Row numbers are 0-based element indices. A syntax error ends the file with an
    InputError naming the element, since an array cannot be resynchronised after it."""
    try:
        with path.open(encoding="utf-8-sig") as fh:
            yield from _array_chunks(path, fh, size)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def _array_chunks(path: Path, fh: IO[str], size: int) -> Iterator[list[Row]]:
    decoder = json.JSONDecoder()
    text = fh.read(_JSON_CHUNK).lstrip()
    if not text.startswith("["):
        raise InputError(f"{path}: a .json input must hold one JSON array of rows")
    pos, index, rows = 1, 0, []
    while True:
        pos = _skip(text, pos, ",")
        if pos < len(text) and text[pos] == "]":
            break
        error: json.JSONDecodeError | None = None
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            error, end = exc, len(text)
        if end >= len(text):  # incomplete, or a value that ends the buffer and may go on in the next chunk
            more = fh.read(_JSON_CHUNK)
            if more:
                text, pos = text[pos:] + more, 0
                continue
            if pos >= len(text):
                raise InputError(f"{path}: the JSON array ends without ']' after element {index - 1}")
            if error is not None:
                raise InputError(f"{path}: invalid JSON in element {index}: {error.msg}")
        rows.append((index, value))
        index, pos = index + 1, end
        if len(rows) == size:
            yield rows
            rows = []
    if rows:
        yield rows


def _skip(text: str, pos: int, also: str = "") -> int:
    while pos < len(text) and (text[pos].isspace() or text[pos] in also):
        pos += 1
    return pos


def parse_line(line: bytes) -> Any:
    """One JSONL line as its JSON value, or `Broken` saying why it is not one (not UTF-8, invalid JSON): the reader's
    own message for a bad line, which the audit reports too."""
    line = line.rstrip(b"\r\n")  # so a truncated last value reads as "unexpected end", not a control character
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Broken(f"line is not valid UTF-8 (byte {exc.start}: {line[exc.start : exc.start + 1]!r})")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return Broken(f"invalid JSON: {exc}")


def parquet_rows(path: Path, columns: list[str], size: int, ids_only: str | None) -> Iterator[list[Row]]:
    """Rows as dicts of the wanted columns, one record batch at a time (at most one row group in memory)."""
    try:
        pf = pq.ParquetFile(path)
        names = [c for c in columns if c in pf.schema_arrow.names] or None
        if ids_only is not None and _never_null(pf, ids_only):
            names = [ids_only]
        start = 0
        for batch in row_groups.iter_batches(pf, size, names):
            yield list(enumerate(batch.to_pylist(), start))
            start += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read Parquet: {exc}") from None


def _never_null(pf: pq.ParquetFile, name: str) -> bool:
    """Whether the footer statistics prove the flat column `name` has no nulls (so ids need no other column)."""
    meta = pf.metadata
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        stats = next(
            (c.statistics for c in map(group.column, range(group.num_columns)) if c.path_in_schema == name), None
        )
        if stats is None or not stats.has_null_count or stats.null_count > 0:
            return False
    result: bool = meta.num_row_groups > 0
    return result


def arrow_rows(path: Path, columns: list[str], size: int, ids_only: str | None) -> Iterator[list[Row]]:
    """Rows of an Arrow IPC file (stream or file format, as `datasets` writes), memory-mapped."""
    try:
        with pa.memory_map(str(path)) as source:
            start = 0
            for batch in _ipc_batches(source):
                names = [c for c in columns if c in batch.schema.names]
                if ids_only in names and batch.column(ids_only).null_count == 0:
                    names = [ids_only]
                batch = batch.select(names) if names else batch
                for offset in range(0, batch.num_rows, size):
                    yield list(enumerate(batch.slice(offset, size).to_pylist(), start + offset))
                start += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read Arrow: {exc}") from None


def _ipc_batches(source: pa.MemoryMappedFile) -> Iterator[pa.RecordBatch]:
    magic = source.read(6)
    source.seek(0)
    if magic == b"ARROW1":
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from pa.ipc.open_stream(source)
