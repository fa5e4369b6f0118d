"""The prompt reader: `[input]` in, a stream of `Prompt` (or `BadInput`) batches out.

It owns what happens to a row once its file has been read (`input_files` resolves `input.path` and streams each
format): turning each row into chat messages, giving it an id, rejecting bad rows with the file and row, and
finding duplicate ids before anything is sent. An input file without a row is a warning on this module's logger
(once per file): the run goes on with the other files, or finishes with nothing to do.

Row numbers in `source` ("file:row") are 1-based line numbers for JSONL and OpenAI batch files (what an editor
shows) and 0-based row indices for Parquet and Arrow files (what `pyarrow` and `datasets` indexing use).

Ids follow ids.py, the rule the audit and the repaired export share: the `id_field` value as a string (integers
are converted). A row without one gets a content hash: the first 16 hex digits of sha256 over the canonical JSON
(sorted keys, no whitespace) of its final messages, that is after `system_prompt` is prepended. "Without one" means
the field is absent from a JSON row, or null in a Parquet or Arrow column (a column cannot tell a missing value from
a null); a JSON row that says `"id": null` is `bad_input`, since an id that was meant to be there and is not would
otherwise turn silently into a hash. The hash is stable across runs and machines, but changing `system_prompt`
changes it, and identical prompts without ids hash alike, so they count as duplicates. A bad row with no usable id
gets "bad-input:<file name>:<row>" (the path relative to the inputs' common folder when two files share a name).

Samples: a row yields `generation.samples` items, ids `<id>#<k>` (k = 0..N-1) with `source_id` = the row's id, or
one item under its own id when N is 1. In an OpenAI batch file with `input.request_overrides`, a body's `n` replaces
generation.samples (and generation.temperatures) for its row: `n = k` gives k items, `<custom_id>#<j>`; `n = 1` the
custom_id alone. An `n` that is not an integer from 1 to 128 (batch_lines.py) stops the run (InputError naming the file
and row): it decides which ids exist, so it cannot wait for the row to be rejected.

Duplicates are found among the ids iter_batches yields (sample ids included, so a row `a` with n = 2 and a row
`a#0` collide): `check_duplicates` puts a 64-bit hash of every id into a numpy array (8 bytes an id, 8 MB per
million), sorts it to find the few hashes seen more than once, then rereads only the ids with those hashes to confirm
them exactly, so a hash collision is never reported. With `dedupe`, `iter_batches` keeps the first occurrence of each
id and remembers only the ids known to repeat, so its memory grows with the number of duplicates, not with the
dataset.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..config import GenerationConfig, InputConfig, ValidateConfig
from ..conversation import ConversationError
from ..errors import ConfigError, InputError
from ..records import BadInput, Prompt, RequestOverrides
from ..schema import stringify
from . import conversations
from .batch_lines import LineProblem, Unhonoured, request_of, row_samples
from .conversations import short, type_name
from .ids import IdProblem, content_id, given_id, hashed
from .input_files import Broken, Row, arrow_rows, json_array_rows, jsonl_rows, labels, parquet_rows, resolve
from .row_audit import AuditOptions, RowAudit, audit_row, regenerated_positions
from .stored import fingerprint, with_system

log = logging.getLogger(__name__)

FORMATS = ("auto", "jsonl", "parquet", "datasets", "openai-batch")


class _Problem(Exception):
    """Why a parsed row cannot become a Prompt; caught in `_normalise`, never escapes the reader."""


def sample_id(input_id: str, k: int) -> str:
    """The id of sample k of an input row that yields several (generation.samples or an OpenAI batch body's n)."""
    return f"{input_id}#{k}"


class PromptReader:
    """Reads `[input]` as batches of `Prompt | BadInput`, streamed, `cfg.batch_rows` at a time."""

    def __init__(
        self,
        cfg: InputConfig,
        *,
        path_override: str | None = None,
        generation: GenerationConfig | None = None,
        validate: ValidateConfig | None = None,
        only_ids: frozenset[str] | None = None,
    ):
        if cfg.format not in FORMATS:
            raise ConfigError(f"input.format {cfg.format!r} is not one of {', '.join(FORMATS)}")
        if cfg.batch_rows < 1:
            raise ConfigError(f"input.batch_rows must be at least 1, got {cfg.batch_rows}")
        self._cfg = cfg
        self._gen = generation or GenerationConfig()
        self._pattern = path_override if path_override is not None else cfg.path
        self._openai = cfg.format == "openai-batch"
        self._kinds: dict[Path, str] | None = None
        self._labels: dict[Path, str] = {}
        self._repeats: dict[str, int] | None = None  # id -> occurrences, for ids seen more than once
        self._total = 0  # rows in the input, set by the duplicate pass
        self._warned_empty: set[Path] = set()  # each empty input file is reported once, not once per pass
        self._only_ids = only_ids  # --only-ids: these ids (or `row:<n>` row numbers) and no other row
        self._unhonoured = Unhonoured(request_overrides=cfg.request_overrides, model=self._gen.model)
        self._audit = AuditOptions(
            messages_field=cfg.messages_field,
            prompt_field=cfg.prompt_field,
            thinking=self._gen.thinking,
            validate=validate or ValidateConfig(),
        )

    # ------------------------------------------------------------ public API

    def every_row(self) -> PromptReader:
        """This input with `input.select = "all"` and no --only-ids: what the first-rows check judges. It shares the
        warnings already given (an empty file is reported once per run, not once per reader)."""
        other = PromptReader(
            dataclasses.replace(self._cfg, select="all"),
            path_override=self._pattern,
            generation=self._gen,
            validate=self._audit.validate,
        )
        other._warned_empty = self._warned_empty
        return other

    def files(self) -> list[Path]:
        """The input files, in reading order: sorted matches, and a datasets folder's files in its own order."""
        if self._kinds is None:
            self._kinds = resolve(self._pattern, self._cfg.format)
            self._labels = labels(list(self._kinds))
        return list(self._kinds)

    def iter_batches(self) -> Iterator[list[Prompt | BadInput]]:
        """Every row as a Prompt or a BadInput, in file order, in lists of `batch_rows` (the last may be shorter).

        With `dedupe`, a repeated id is yielded once, at its first row; this runs `check_duplicates` first if it
        has not run yet.
        """
        repeats = self._duplicates() if self._cfg.dedupe else {}
        seen: set[str] = set()
        batch: list[Prompt | BadInput] = []
        for path, rows in self._chunks(self._columns(with_keep=True), ids_only=None):
            for row, data in rows:
                count, own = self._sample_count(path, row, data)
                for item in self._samples(self._normalise(path, row, data), count, temperatures=not own):
                    if item.id in repeats:
                        if item.id in seen:
                            continue
                        seen.add(item.id)
                    batch.append(item)
                if len(batch) >= self._cfg.batch_rows:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def scan_ids(self) -> Iterator[list[str]]:
        """The id of every row (duplicates included), as iter_batches gives it, without building Prompts.

        Parquet files whose id column has no nulls (by the footer statistics) are read for that column only.
        """
        for _, rows in self._scan():
            yield [item_id for _, item_id in rows]
        if self._openai:
            self._unhonoured.warn(self._pattern)

    def check_duplicates(self) -> int:
        """Find repeated ids in a streamed pass; returns how many items iter_batches will yield.

        Without `dedupe` a repeated id is an InputError naming up to 5 of them with their file:row. With `dedupe`
        the count excludes the later copies that iter_batches skips.
        """
        repeats = self._duplicates()
        if repeats and not self._cfg.dedupe:
            raise InputError(self._duplicate_message(repeats))
        return self._total - sum(n - 1 for n in repeats.values())

    # ------------------------------------------------------------ duplicates

    def _duplicates(self) -> dict[str, int]:
        if self._repeats is not None:
            return self._repeats
        # Python's str hash is 64-bit and salted per process; both passes run in this process, so they agree.
        parts = [np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids)) for ids in self.scan_ids()]
        hashes = np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
        self._total = len(hashes)
        suspects = set(np.unique(hashes[1:][hashes[1:] == hashes[:-1]]).tolist())
        counts: dict[str, int] = {}
        if suspects:  # a second pass, only when some hash repeats; it keeps the suspects' ids exactly
            for _, rows in self._scan():
                for _, item_id in rows:
                    if hash(item_id) in suspects:
                        counts[item_id] = counts.get(item_id, 0) + 1
        self._repeats = {item_id: n for item_id, n in counts.items() if n > 1}
        return self._repeats

    def _duplicate_message(self, repeats: dict[str, int]) -> str:
        examples = dict.fromkeys(list(repeats)[:5])
        where: dict[str, list[str]] = {item_id: [] for item_id in examples}
        for path, rows in self._scan():
            for row, item_id in rows:
                if item_id in where and len(where[item_id]) < 3:
                    where[item_id].append(f"{path}:{row}")
        shown = "; ".join(f"{item_id!r} at {', '.join(places)}" for item_id, places in where.items())
        extra = sum(n - 1 for n in repeats.values())
        return (
            f"{self._pattern}: {len(repeats)} ids occur more than once ({extra} extra rows): {shown}. "
            "Fix the input or set input.dedupe = true to keep the first row of each id."
        )

    # ------------------------------------------------------------ reading

    def _columns(self, *, with_keep: bool) -> list[str]:
        cfg = self._cfg
        conv = conversations.CONVERSATION_FIELDS if cfg.messages_field == "auto" else (cfg.messages_field,)
        media = (conversations.TOOLS_FIELD, *conversations.MEDIA_FIELDS)  # read with the conversation
        cols = [cfg.id_field, *conv, cfg.prompt_field, *media, *(cfg.keep_fields if with_keep else ())]
        return list(dict.fromkeys(cols))

    def _chunks(self, columns: list[str], ids_only: str | None) -> Iterator[tuple[Path, list[Row]]]:
        size = self._cfg.batch_rows
        self.files()
        assert self._kinds is not None
        index = 0  # the row's number over all files, for `row:<n>` in --only-ids
        for path, kind in self._kinds.items():
            if kind == "jsonl":
                chunks = jsonl_rows(path, size)
            elif kind == "json":
                chunks = json_array_rows(path, size)
            elif kind == "parquet":
                chunks = parquet_rows(path, columns, size, ids_only)
            else:
                chunks = arrow_rows(path, columns, size, ids_only)
            empty = True
            for rows in chunks:
                empty = empty and not rows
                if self._only_ids is not None or self._cfg.select == "invalid":
                    kept = [r for i, r in enumerate(rows, index) if self._selected(path, i, *r)]
                    index, rows = index + len(rows), kept
                yield path, rows
            if empty and path not in self._warned_empty:
                self._warned_empty.add(path)
                log.warning("%s: input file has no rows", path)

    def _selected(self, path: Path, index: int, row: int, data: Any) -> bool:
        """Whether a row passes input.select and --only-ids (both filter before ids are counted, so the run's
        total, resume and iter_batches all see the same rows)."""
        if self._only_ids is not None and f"row:{index}" not in self._only_ids:
            if self._row_id(path, row, data) not in self._only_ids:
                return False
        return self._cfg.select != "invalid" or audit_row(data, self._audit).failing

    def _scan(self) -> Iterator[tuple[Path, list[tuple[int, str]]]]:
        """Each row's number with every id iter_batches yields for it (one per sample), without building Prompts."""
        whole = self._openai or self._cfg.select == "invalid"  # judging a row's turns needs more than its id
        ids_only = None if whole else self._cfg.id_field
        for path, rows in self._chunks(self._columns(with_keep=False), ids_only):
            found: list[tuple[int, str]] = []
            for row, data in rows:
                if self._openai and isinstance(data, dict):
                    self._unhonoured.note(data)  # not in _row_id, which --only-ids also calls: once a row
                row_id, (count, _) = self._row_id(path, row, data), self._sample_count(path, row, data)
                if count == 1:
                    found.append((row, row_id))
                else:
                    found.extend((row, sample_id(row_id, k)) for k in range(count))
            yield path, found

    # ------------------------------------------------------------ rows

    def _row_id(self, path: Path, row: int, data: Any) -> str:
        """The id `_normalise` would give, cheaply when the row carries one."""
        if isinstance(data, dict):
            try:
                given = self._given_id(data, self._json(path))
            except _Problem:
                return self._bad_id(path, row)
            if given is not None:
                return given
        return self._normalise(path, row, data).id

    def _normalise(self, path: Path, row: int, data: Any) -> Prompt | BadInput:
        source = f"{path}:{row}"
        if isinstance(data, Broken):
            return BadInput(self._bad_id(path, row), source, data.detail, self._keep({}))
        if not isinstance(data, dict):
            detail = f"row is a JSON {type_name(data)}, not an object"
            return BadInput(self._bad_id(path, row), source, detail, self._keep({}))
        given: str | None = None
        try:
            given = self._given_id(data, self._json(path))
            messages, overrides = self._openai_request(data) if self._openai else (self._messages(data), None)
            turns = () if self._openai else self._turns(messages, data)
            tools = self._tools(data)
        except (_Problem, LineProblem) as problem:
            return BadInput(given or self._bad_id(path, row), source, str(problem), self._keep(data))
        mark = fingerprint(messages, turns or (len(messages),))
        pid = given or content_id(hashed(messages, tools))
        return Prompt(
            pid, messages, source, self._keep(data), turns, tools=tools, fingerprint=mark, overrides=overrides
        )

    def _turns(self, messages: tuple[dict[str, str], ...], data: dict[str, Any]) -> tuple[int, ...]:
        """Where the generated turns go; () for the common case of one new turn after the last message. With
        `input.repair = "from_first_bad_turn"`, only the turns from the row's first failing one on."""
        verdict = audit_row(data, self._audit) if self._cfg.repair == "from_first_bad_turn" else RowAudit()
        try:
            positions = regenerated_positions(messages, self._gen.turns, self._cfg.repair, verdict)
        except ConversationError as exc:
            raise _Problem(str(exc)) from None
        return () if positions == (len(messages),) else positions

    def _sample_count(self, path: Path, row: int, data: Any) -> tuple[int, bool]:
        """How many samples a row yields, and whether the row itself asked (an honoured OpenAI batch `body.n`)
        rather than generation.samples."""
        n = row_samples(data, f"{path}:{row}") if self._openai and self._cfg.request_overrides else None
        return (self._gen.samples, False) if n is None else (n, True)

    def _samples(self, item: Prompt | BadInput, n: int, *, temperatures: bool) -> list[Prompt | BadInput]:
        """`n` items for one input row: ids `<id>#<k>`, each with generation.temperatures[k] if `temperatures`."""
        if n == 1:
            return [item]
        if isinstance(item, BadInput):
            return [dataclasses.replace(item, id=sample_id(item.id, k), source_id=item.id) for k in range(n)]
        out: list[Prompt | BadInput] = []
        for k in range(n):
            temperature = self._gen.temperatures[k] if temperatures and self._gen.temperatures else None
            out.append(dataclasses.replace(item, id=sample_id(item.id, k), source_id=item.id, temperature=temperature))
        return out

    def _json(self, path: Path) -> bool:
        """Whether rows of `path` are JSON objects, where a null field is written on purpose (not a column gap)."""
        return self._kinds is not None and self._kinds.get(path) in ("jsonl", "json")

    def _given_id(self, data: dict[str, Any], json_row: bool) -> str | None:
        """The row's own id by ids.py's rule; None when it has none; _Problem when it has one that cannot be used."""
        key = "custom_id" if self._openai else self._cfg.id_field
        try:
            return given_id(data, key, json_row=json_row, required=self._openai)
        except IdProblem as problem:
            raise _Problem(str(problem)) from None

    def _tools(self, data: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """The row's tools (the request's `tools`, sent with every turn), or the body's own in an OpenAI batch."""
        body = data.get("body") if self._openai else data
        try:
            return conversations.tools(body) if isinstance(body, dict) else ()
        except ConversationError as exc:
            raise _Problem(str(exc)) from None

    def _messages(self, data: dict[str, Any]) -> tuple[dict[str, str], ...]:
        if (media := conversations.media_problem(data)) is not None:
            raise _Problem(media)
        mf, pf = self._cfg.messages_field, self._cfg.prompt_field
        found = conversations.find_conversation(data, mf)
        if found is not None:
            try:
                return self._with_system(conversations.parse(found[1], found[0]))
            except ConversationError as exc:
                raise _Problem(str(exc)) from None
        prompt = data.get(pf)
        if prompt is None:
            names = " or ".join(repr(n) for n in (*conversations.CONVERSATION_FIELDS, pf)) if mf == "auto" else None
            raise _Problem(f"no {names or f'{mf!r} or {pf!r}'} field")
        if not isinstance(prompt, str):
            raise _Problem(f"{pf} must be a string, got {type_name(prompt)} {short(prompt)}")
        if not prompt.strip():
            raise _Problem(f"{pf} is empty")
        return self._with_system(({"role": "user", "content": prompt},))

    def _openai_request(self, data: dict[str, Any]) -> tuple[tuple[dict[str, str], ...], RequestOverrides]:
        given, overrides = request_of(data)
        try:
            messages = self._with_system(conversations.parse(given, "body.messages"))
        except ConversationError as exc:
            raise _Problem(str(exc)) from None
        return messages, overrides

    def _with_system(self, messages: tuple[dict[str, str], ...]) -> tuple[dict[str, str], ...]:
        return with_system(messages, self._cfg.system_prompt)

    def _keep(self, data: dict[str, Any]) -> dict[str, Any]:
        body = data.get("body") if self._openai else None
        extra: dict[str, Any] = {}
        for name in self._cfg.keep_fields:
            value = data.get(name)
            if value is None and isinstance(body, dict):
                value = body.get(name)
            extra[name] = stringify(value)
        return extra

    def _bad_id(self, path: Path, row: int) -> str:
        return f"bad-input:{self._labels.get(path, path.name)}:{row}"


def first_rows_have_tools(reader: PromptReader, rows: int) -> bool:
    """Whether any of the input's first `rows` rows carries tools (preflight then wants a tool-call parser)."""
    first = itertools.islice(itertools.chain.from_iterable(reader.iter_batches()), rows)
    return any(isinstance(item, Prompt) and item.tools for item in first)
