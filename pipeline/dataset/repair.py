"""`regen export RUN --format repaired --original PATH --out DIR`: the original dataset written back whole, with the
rows the run regenerated carrying their new assistant turns and every other row as it was.

One output file per original file, with the same name (relative path when two share a name) and format (JSONL,
gzipped JSONL, a JSON array, Parquet), the same rows in the same order and the same columns:

- a row the run did not regenerate is the original: the same bytes for JSONL lines, the same Arrow values for
  Parquet, the same JSON value for JSON arrays;
- a row the run accepted gets its generated turns in place of the stored assistant turns (an answer missing after a
  trailing user turn is appended; with `input.repair = "from_first_bad_turn"` only the turns from the row's first
  failing one on, the positions the reader chose by the same audit), every other key of the row and of its
  messages kept; reasoning goes where the original keeps it: the message's own reasoning field
  (`reasoning_content`, `reasoning`, `thinking`; for Parquet, the one the message struct has), or inline `<think>`
  when the row (or, failing that, an earlier row of the file) keeps it inline, or nowhere else gives it a place;
- a row the run rejected again is kept as it was (`on_reject = "keep"`) or left out (`"drop"`); either way it is
  listed in `repair-rows.jsonl` with its reason, as is a row the audit fails that the run has not regenerated;
- a row repeating an earlier row's id (a dataset run with `input.dedupe = true`: the run answered the first) gets
  the same fate as the first when it holds the same conversation (the fingerprint the run recorded; a content-hash
  id is the conversation itself), so every copy carries the new turns; counted in `repeats`. A repeated id with
  another conversation is kept as it is (`duplicate`).

Rows are matched to the run by the reader's ids (the run's own `[input]` from run.json: id field, or the content
hash of the conversation with its system prompt). The export is atomic: every file is written hidden, renamed into
place once all are complete, and `repair-report.json` (the counts by reason) is written last, so a crash leaves the
previous output or none, and a rerun writes it whole. The run's accepted turns are read on demand
(dataset/generated.py): an index of ids, and the row groups the original's rows ask for, so memory does not grow with
the run's texts.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import pyarrow as pa

from ..config import Config, config_from_dict
from ..conversation import ConversationError, Message
from ..errors import ConfigError, InputError, OutputError
from ..inputs import conversations
from ..inputs.ids import IdProblem, content_id, given_id, hashed
from ..inputs.input_files import labels, resolve
from ..inputs.row_audit import AuditOptions, RowAudit, audit_row, regenerated_positions
from ..inputs.stored import INLINE, REASONING_FIELDS, fingerprint, split_message, with_system
from ..store.doneset import DoneSet
from ..store.files import damage_note, refuse_partial
from ..store.layout import MANIFEST, PART_KINDS
from ..store.manifest import read_manifest
from ..store.partition import id_hash
from .card import (
    CARD,
    CardOptions,
    front_matter,
    generation_section,
    markdown_table,
    publisher_note,
    simulated_note,
)
from .generated import Generated, accepted_rows, rejected_rows
from .redact import Hosts
from .rewrite import rewrite

ON_REJECT = ("keep", "drop")
REPORT = "repair-report.json"
ROWS = "repair-rows.jsonl"
_TMP = ".repair.tmp"


@dataclass(frozen=True, slots=True)
class RepairOptions:
    """How the repaired export is written: `regen export --format repaired`'s flags of the same names."""

    original: str | None = None  # the dataset the run read (default: the run's input.path)
    on_reject: str = "keep"  # a row rejected again: kept as it was, or dropped
    partial: bool = False  # export even when committed parts are damaged (their rows stay as they were)


def export_repaired(run_dir: Path, out: Path, options: RepairOptions) -> dict[str, Any]:
    """Write the repaired dataset to `out`; returns the report (also written to out/repair-report.json).
    InputError when committed parts are damaged (their rows would stay broken), unless `options.partial`."""
    if options.on_reject not in ON_REJECT:
        raise ConfigError(f"--on-reject must be keep or drop, got {options.on_reject!r}")
    cfg = _run_config(run_dir)
    if cfg.generation.samples > 1:
        raise ConfigError(f"{run_dir}: a run with generation.samples > 1 has no single repair per row")
    kinds = resolve(options.original or cfg.input.path, cfg.input.format)
    _check_out(out, list(kinds), run_dir)
    damaged = refuse_partial(run_dir, list(PART_KINDS), partial=options.partial)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(f".*{_TMP}"):
        stale.unlink()
    repair = _Repair(cfg, accepted_rows(run_dir), rejected_rows(run_dir), options.on_reject)
    names = labels(list(kinds))
    written: list[tuple[Path, Path]] = []
    with _Listing(out / f".{ROWS}{_TMP}") as listing:
        repair.listing = listing
        for path, kind in kinds.items():
            target = out / names[path]
            tmp = target.with_name(f".{target.name}{_TMP}")
            with _output_errors(path, tmp):
                target.parent.mkdir(parents=True, exist_ok=True)
                repair.json_rows = kind in ("jsonl", "json")
                rewrite(kind, repair, path, tmp)
            written.append((tmp, target))
        repair.unplaced()
    report = repair.report(run_dir, kinds, out, [str(t.relative_to(out)) for _, t in written])
    report["damaged"] = [damage_note(d) for d in damaged]
    card = out / f".{CARD}{_TMP}"
    card.write_text(_card(run_dir, report, set(kinds.values())), encoding="utf-8")
    for tmp, target in [*written, (out / f".{ROWS}{_TMP}", out / ROWS), (card, out / CARD)]:
        os.replace(tmp, target)
    tmp = out / f".{REPORT}{_TMP}"
    tmp.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    os.replace(tmp, out / REPORT)
    return report


def _run_config(run_dir: Path) -> Config:
    manifest = read_manifest(run_dir)
    if not manifest or not isinstance(manifest.get("config"), dict):
        raise InputError(f"{run_dir}: no run.json with the run's config; a repaired export needs the run's [input]")
    return config_from_dict(manifest["config"], where=str(run_dir / MANIFEST))


def _check_out(out: Path, files: list[Path], run_dir: Path) -> None:
    """`out` never holds an original file nor lies in the run directory: the export must not overwrite its input."""
    where = out.resolve()
    if any(p.resolve().parent == where or where in p.resolve().parents for p in files):
        raise ConfigError(f"--out {out} holds original files; write the repaired dataset to another folder")
    if where == run_dir.resolve() or run_dir.resolve() in where.parents:
        raise ConfigError(f"--out {out} is inside the run directory {run_dir}")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")


# ---------------------------------------------------------------- one row


@dataclass
class _Repair:
    """Decides each row's fate and counts it (a RowChoice); the file writers of dataset/rewrite.py only move
    bytes."""

    cfg: Config
    accepted: Mapping[str, Generated]
    rejected: dict[str, tuple[str, str | None]]
    on_reject: str
    listing: _Listing | None = None
    counts: Counter[str] = field(default_factory=Counter)
    by_reason: dict[str, Counter[str]] = field(default_factory=dict)
    style: str = ""  # the reasoning style of the current file, from its rows (or its Parquet schema)
    # regenerated ids met in the original so far, as 64-bit hashes (8 bytes an id), as resume's done set keeps them
    placed: DoneSet = field(default_factory=DoneSet)
    json_rows: bool = False  # the current file is JSON (a null id was written on purpose), as the reader reads it

    def __post_init__(self) -> None:
        self.audit = AuditOptions.from_config(self.cfg)

    def row(self, data: Any, source: str) -> Any:
        """The row to write: `data` itself (untouched), a repaired copy, or None (dropped)."""
        self.counts["rows"] += 1
        verdict = audit_row(data, self.audit)
        self.style = self.style or next((turn.style for turn, _ in verdict.turns if turn.style), "")
        reasons = verdict.reasons() or ["ok"]
        row_id = self._id(data)
        if row_id is not None and (row_id in self.accepted or row_id in self.rejected):
            key = id_hash(row_id)
            met = key in self.placed
            if met and not self._repeat(data, row_id, verdict):
                detail = "repeats an earlier row's id with another conversation; kept as it is"
                self._list(row_id, source, "duplicate_id", detail)
                return self._count("duplicate", reasons, data)
            self.counts["repeats"] += met
            if not met:
                self.placed.add(key)
        if row_id is not None and row_id in self.accepted:
            return self._paste(data, row_id, source, verdict, reasons)
        if row_id is not None and row_id in self.rejected:
            self._list(row_id, source, self.rejected[row_id][0], "regenerated but rejected again")
            if self.on_reject == "drop":
                return self._count("dropped", reasons, None)
            return self._count("rejected_kept", reasons, data)
        if verdict.failing:
            self._list(row_id, source, reasons[0], "fails the audit and was not regenerated")
        return self._count("left", reasons, data)

    def _repeat(self, data: dict[str, Any], row_id: str, verdict: RowAudit) -> bool:
        """Whether a row repeating a regenerated row's id holds the conversation the run answered for it (the
        first copy's), and so takes the same fate. Without a recorded fingerprint, only a content-hash id says so."""
        recorded = self.accepted[row_id].fingerprint if row_id in self.accepted else self.rejected[row_id][1]
        if recorded is None:
            return self._given(data) is None
        mismatch = self._mismatch(data, recorded, verdict)  # passes_now: counted so by _paste, as for the first
        return mismatch is None or (mismatch == "passes_now" and row_id in self.accepted)

    def _paste(self, data: dict[str, Any], row_id: str, source: str, verdict: RowAudit, reasons: list[str]) -> Any:
        """The row with the run's turns, unless it no longer holds the conversation the run answered."""
        generated = self.accepted[row_id]
        mismatch = self._mismatch(data, generated.fingerprint, verdict)
        if mismatch is not None:
            self._list(row_id, source, *_MISMATCH[mismatch])
            return self._count(mismatch, reasons, data)
        repaired = self._repaired(data, generated.turns, verdict)
        if repaired is None:
            self._list(row_id, source, "no_place", "the generated turns do not fit the row's conversation")
            return self._count("changed", reasons, data)
        self.counts["unchecked"] += generated.fingerprint is None  # a run older than the check: counted
        return self._count("repaired", reasons, repaired)

    def _mismatch(self, data: dict[str, Any], recorded: str | None, verdict: RowAudit) -> str | None:
        """None when the row still asks what the run answered (or the run recorded nothing to check); else
        `changed` (its question, history or place differ: edited, or another dataset) or `passes_now` (its
        replaced turns changed and pass the audit: fixed by hand since the run)."""
        if recorded is None:
            return None
        now = self._fingerprint(data, verdict)
        if now is None or now[:16] != recorded[:16]:
            return "changed"
        if now[16:] != recorded[16:] and not verdict.failing:
            return "passes_now"
        return None

    def _fingerprint(self, data: dict[str, Any], verdict: RowAudit) -> str | None:
        """The fingerprint the reader gave this row (inputs/reader.py): its messages with the system prompt, the
        positions `generation.turns` and `input.repair` choose."""
        messages = self._messages(data)
        if messages is None:
            return None
        try:
            positions = regenerated_positions(messages, self.cfg.generation.turns, self.cfg.input.repair, verdict)
        except ConversationError:
            return None
        return fingerprint(messages, positions)

    def unplaced(self) -> None:
        """List and count the regenerated rows whose id no original row has (deleted since the run)."""
        for row_id in (i for i in self.accepted if id_hash(i) not in self.placed):
            self._list(row_id, "", "no_row", "regenerated, but no row of the original has this id; not written")
            self.counts["unplaced"] += 1

    def _count(self, fate: str, reasons: list[str], row: Any) -> Any:
        self.counts[fate] += 1
        for reason in reasons:
            self.by_reason.setdefault(reason, Counter())[fate] += 1
        return row

    def _list(self, row_id: str | None, source: str, reason: str, detail: str) -> None:
        if self.listing is not None:
            self.listing.write({"id": row_id, "source": source, "reason": reason, "detail": detail})

    def _id(self, data: Any) -> str | None:
        """The id the reader gave this row in the run, by the same rule (inputs/ids.py); None when the run refused
        the row (an id it could not use, a JSON `"id": null` included) or it has no conversation to hash."""
        if not isinstance(data, dict):
            return None
        try:
            given = self._given(data)
        except IdProblem:
            return None
        if given is not None:
            return given
        messages = self._messages(data)
        try:
            tools = conversations.tools(data)
        except ConversationError:
            return None
        return None if messages is None else content_id(hashed(messages, tools))

    def _given(self, data: dict[str, Any]) -> str | None:
        return given_id(data, self.cfg.input.id_field, json_row=self.json_rows)

    def _messages(self, data: dict[str, Any]) -> tuple[Message, ...] | None:
        """The row's messages as the reader sends them (system prompt first), or None if it has none."""
        inp = self.cfg.input
        found = conversations.find_conversation(data, inp.messages_field)
        try:
            if found is not None:
                messages = conversations.parse(found[1], found[0])
            else:
                messages = conversations.parse([{"role": "user", "content": data.get(inp.prompt_field)}], "prompt")
        except ConversationError:
            return None
        return with_system(messages, inp.system_prompt)

    def _repaired(
        self, data: dict[str, Any], turns: list[tuple[str | None, str]], verdict: RowAudit
    ) -> dict[str, Any] | None:
        found = conversations.find_conversation(data, self.cfg.input.messages_field)
        if found is None:
            return None
        name, raw = found
        messages = conversations.parse(raw, name)
        positions = regenerated_positions(messages, self.cfg.generation.turns, self.cfg.input.repair, verdict)
        if len(positions) != len(turns):
            return None
        styles = [
            split_message(raw[i], m["content"], m.get("reasoning_content"))[3] if m["role"] == "assistant" else ""
            for i, m in enumerate(messages)
        ]
        fallback = next((s for s in styles if s), "") or self.style or INLINE
        new = [dict(m) for m in raw]
        for position, (reasoning, answer) in zip(positions, turns, strict=True):
            if position == len(raw):
                new.append(_new_message(raw[-1]))
                styles.append("")
            _put(new[position], reasoning, answer, styles[position] or fallback)
        return {**data, name: new}

    def report(self, run_dir: Path, kinds: dict[Path, str], out: Path, files: list[str]) -> dict[str, Any]:
        c = self.counts
        return {
            "run_dir": str(run_dir),
            "original": [str(p) for p in kinds],
            "out": str(out),
            "files": files,
            "rows": c["rows"],
            "audited_failing": c["rows"] - self.by_reason.get("ok", Counter()).total(),
            "regenerated": sum(c[k] for k in _REGENERATED),
            "repaired": c["repaired"],
            "rejected_kept": c["rejected_kept"],
            "dropped": c["dropped"],
            "left": c["left"],
            "repeats": c["repeats"],
            **{k: c[k] for k in (*_NOT_PASTED, "unplaced", "unchecked")},
            "by_reason": {reason: dict(fates) for reason, fates in sorted(self.by_reason.items())},
            "listed": ROWS,
        }


# ---------------------------------------------------------------- the dataset card

_FATES = (
    ("repaired", "repaired (new turns)"),
    ("rejected_kept", "regenerated, rejected again, kept as it was"),
    ("dropped", "regenerated, rejected again, left out"),
    ("changed", "regenerated, but the row changed since the run: kept as it is"),
    ("passes_now", "regenerated, but the row passes the audit now (fixed since the run): kept as it is"),
    ("duplicate", "a repeated id with another conversation: kept as it is"),
    ("left", "left as it was"),
)
_NOT_PASTED = ("changed", "passes_now", "duplicate")
_REGENERATED = ("repaired", "rejected_kept", "dropped", "changed", "passes_now")
_MISMATCH = {
    "changed": ("conversation_changed", "the row's conversation differs from the one the run answered; kept as it is"),
    "passes_now": ("passes_now", "the row passes the audit now (fixed since the run?); kept as it is"),
}


def _card(run_dir: Path, report: dict[str, Any], kinds: set[str]) -> str:
    """README.md: the card's front matter (license and language from `[export]`) and the repair's counts by audit
    reason; no endpoint URL or host (the run's addresses are scrubbed from the whole text)."""
    manifest = read_manifest(run_dir) or {}
    opts = CardOptions().resolved(manifest)
    rows = report["rows"] - report["dropped"]
    # `configs` only when every file has one format: `datasets` loads one builder per config.
    files = {"train": report["files"]} if len(kinds) == 1 else {}
    head = front_matter({"data_files": files, "rows": rows, "format": "repaired"}, manifest, None, opts)
    c = report
    counts = [
        ("rows audited", c["rows"]),
        ("failing the audit", c["audited_failing"]),
        ("regenerated", c["regenerated"]),
        *((label, c[fate]) for fate, label in _FATES),
        ("regenerated, but no original row has its id (not written)", c["unplaced"]),
        ("of the regenerated, repeats of an earlier row (the same conversation: the same fate)", c["repeats"]),
    ]
    by_reason = [
        (f"`{reason}`", sum(f.values()), sum(f.get(k, 0) for k in _REGENERATED),
         *(f.get(fate, 0) for fate, _ in _FATES))
        for reason, f in c["by_reason"].items()
    ]  # fmt: skip
    body = [
        "# Repaired dataset (regen)\n",
        f"The original dataset written back whole by `regen export --format repaired`: {rows} rows in "
        f"{len(c['files'])} files, in the original order and format. Every row was audited with the validators of "
        "`regen run`; the rows the run regenerated and accepted carry the new assistant turns, every other row is "
        f"the original, as is every regenerated row that no longer holds the conversation the run answered.\n",
        simulated_note(manifest),
        publisher_note(opts),
        "## Repair\n\n" + markdown_table(("rows", "count"), counts),
        "## By audit reason\n\nThe reasons of each original row (a row failing for two counts under both; `ok`: it "
        "passes the audit).\n\n"
        + markdown_table(("reason", "rows", "regenerated", *(label for _, label in _FATES)), by_reason)
        + f"\n`{ROWS}` lists the rows rejected again, the regenerated rows not pasted (and why), the regenerated "
        f"ids with no row, and the failing rows not regenerated; `{REPORT}` has these "
        "counts as JSON.\n",
        generation_section(manifest),
    ]
    text = "---\n" + head + "---\n\n" + "\n".join(part for part in body if part)
    return Hosts.of_run(run_dir, manifest).scrub(text)


def _new_message(last: Any) -> dict[str, Any]:
    """An assistant message in the conversation's own shape, for the answer after a trailing user turn."""
    if isinstance(last, dict) and "from" in last and "role" not in last:
        return {"from": "gpt", "value": ""}
    if isinstance(last, dict) and isinstance(last.get("content"), list):  # a file of content parts
        return {"role": "assistant", "content": [{"type": "text", "text": ""}]}
    return {"role": "assistant", "content": ""}


def _put(message: dict[str, Any], reasoning: str | None, answer: str, style: str) -> None:
    """Set one assistant message's answer (and reasoning, by `style`), keeping its other keys and content type."""
    key = "value" if "from" in message and "role" not in message else "content"
    if isinstance(message.get(key), list):  # content parts: the answer (and reasoning) as parts of the same shape
        message[key] = _parts(message[key], reasoning, answer, style)
        return
    if style in REASONING_FIELDS:
        old = message.get(style)
        message[style] = reasoning if reasoning is not None else ("" if isinstance(old, str) else None)
        text = answer
    elif style == INLINE and reasoning:
        text = f"<think>\n{reasoning}\n</think>\n\n{answer}"
    else:
        text = answer
    message[key] = text


def _parts(old: list[Any], reasoning: str | None, answer: str, style: str) -> list[dict[str, Any]]:
    """New content parts written as the message's own parts are (`text` or LLaMA-Factory's `value` key): a
    `reasoning` part then a `text` part, or one text part with the reasoning inline when the file keeps it so."""
    key = next((k for p in old if isinstance(p, dict) for k in conversations.TEXT_KEYS if k in p), "text")
    if style == INLINE and reasoning:
        return [{"type": "text", key: f"<think>\n{reasoning}\n</think>\n\n{answer}"}]
    head = [{"type": "reasoning", key: reasoning}] if reasoning is not None else []
    return [*head, {"type": "text", key: answer}]


class _Listing:
    """repair-rows.jsonl: the rows a user must look at (rejected again, not pasted, without a row, or failing and
    not regenerated)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: IO[bytes] | None = None

    def __enter__(self) -> _Listing:
        self.fh = self.path.open("wb")
        return self

    def write(self, entry: dict[str, Any]) -> None:
        assert self.fh is not None
        self.fh.write(orjson.dumps(entry) + b"\n")

    def __exit__(self, *exc: object) -> None:
        assert self.fh is not None
        self.fh.close()


@contextmanager
def _output_errors(path: Path, tmp: Path) -> Iterator[None]:
    """OSError or an Arrow error while repairing one file: OutputError naming it, the hidden copy removed."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write its repaired copy {tmp}: {exc}") from None
