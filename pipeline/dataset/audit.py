"""`regen audit`: measure an existing dataset with the validators of `regen run`, before regenerating anything.

Every row's stored assistant turns (inputs/stored.py: reasoning in a field or inline `<think>`, an unterminated
`<think>` = truncated, a missing answer after a trailing user turn = an empty turn) go through `validator.validate`
exactly as a completion would. A row fails when one of its turns fails, or when it cannot be read as a
conversation (`bad_input`). The report counts rows and turns by reason, by turn index and by a column of the data,
gives length distributions and a few examples per reason (seeded), and `--ids-out` lists the failing rows.

One streaming pass: rows are judged a block at a time (JSONL: blocks of lines in a pool of processes,
inputs/line_blocks.py; other formats: `batch_rows` rows here), each block's counts merged in reading order, and
only counters, fixed-size samples (lengths and examples, dataset/reservoirs.py) and the group table (at most
MAX_GROUPS values) are kept, so memory does not grow with the row count.
`audit_row` (inputs/row_audit.py) judges each row; it is also what `input.select = "invalid"` (inputs/reader.py) and
the repaired export (dataset/repair.py) use, so the three agree on which rows are broken.
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from ..errors import InputError, OutputError
from ..inputs import conversations
from ..inputs.ids import usable_id
from ..inputs.input_files import parse_line, resolve
from ..inputs.line_blocks import line_blocks, line_ranges, ordered_map, read_range
from ..inputs.row_audit import BAD_INPUT, AuditOptions, RowAudit, audit_row
from ..inputs.stored import StoredTurn, read_chunks
from ..records import Verdict
from ..store.doneset import SeenHashes
from ..store.partition import id_hashes
from .reservoirs import Examples, Reservoir

MAX_GROUPS = 1000  # distinct values of the --by column kept apart; the rest count under OTHER
OTHER = "(other)"
EXAMPLE_CHARS = 600
DUPLICATE_EXAMPLES = 5  # repeated ids named in the report


def audit_dataset(path: str, opts: AuditOptions = AuditOptions(), *, ids_out: Path | None = None) -> dict[str, Any]:
    """Audit every row under `path` (a file, folder, glob or datasets folder); InputError when it cannot be read.

    Returns the report (keys in docs/audit.md); with `ids_out`, writes the failing rows' ids there, one a line
    (the id field, or `row:<n>`, 0-based over all rows in reading order, when a row has none), atomically.
    """
    kinds = resolve(path, opts.format)
    tally = _Tally(opts)
    started = time.perf_counter()
    with _IdsFile(ids_out) as ids:
        for part in _parts(kinds, opts):
            for label in tally.merge(part):
                ids.write(label)
    elapsed = time.perf_counter() - started
    report = tally.report()
    report.update(path=path, files=[str(p) for p in kinds], elapsed_s=round(elapsed, 3))
    report["rows_per_s"] = round(report["rows"] / elapsed, 1) if elapsed > 0 else None
    return report


def _parts(kinds: dict[Path, str], opts: AuditOptions) -> Iterator[_Part]:
    """Each file's rows judged and counted a block at a time, in reading order. JSONL goes in blocks of lines
    to `opts.jobs` processes (all cores by default) when the file has more than two blocks; other formats are
    read `batch_rows` rows at a time here."""
    columns = [opts.id_field, *conversations.CONVERSATION_FIELDS, opts.messages_field, opts.prompt_field, opts.by]
    columns = [c for c in dict.fromkeys(columns) if c and c != "auto"]
    block = itertools.count()
    jobs = opts.jobs or os.cpu_count() or 1
    for path, kind in kinds.items():
        if kind == "jsonl":
            work = functools.partial(audit_lines, str(path), opts)
            if path.name.endswith(".gz"):
                chunks: Iterator[Any] = (b for _, b in line_blocks(path, opts.block_bytes))
            else:
                chunks = line_ranges(path, opts.block_bytes)
            blocks = ((next(block), i == 0, where) for i, where in enumerate(chunks))
            big = path.stat().st_size > 2 * opts.block_bytes
            yield from ordered_map(work, blocks, jobs if big else 1)
            continue
        for _, rows in read_chunks({path: kind}, columns, opts.batch_rows):
            part = _Part(opts, next(block), str(path))
            for row, data in rows:
                given = usable_id(data, opts.id_field) if isinstance(data, dict) else None
                part.add(audit_row(data, opts), data, given, f"{path}:{row}")
            yield part


def audit_lines(path: str, opts: AuditOptions, item: tuple[int, bool, bytes | tuple[int, int]]) -> _Part:
    """Judge one block of JSONL lines (`item`: block number, whether it is the file's first, and its bytes or its
    byte range in the file), read
    as `input_files.jsonl_rows` reads them (blank lines skipped, a BOM on line 1 ignored). Line numbers in the
    examples' `source` count from the block's first line until the merge knows where the block starts."""
    number, first, where = item
    data = read_range(path, *where) if isinstance(where, tuple) else where
    part = _Part(opts, number, path)
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    part.lines = len(lines)
    if lines and first:
        lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")
    for local, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row: Any = orjson.loads(line)
        except orjson.JSONDecodeError:
            row = parse_line(line)  # the reader's own message for the bad line
        given = usable_id(row, opts.id_field) if isinstance(row, dict) else None
        part.add(audit_row(row, opts), row, given, local)
    return part


# ---------------------------------------------------------------- counting


class _Part:
    """The counts of one block of rows, made where the block is judged (maybe a worker process), merged in order.

    Examples come from a reservoir of its own (seeded by the block's number); labels of rows without an id are
    their index within the block, made global when merged."""

    def __init__(self, opts: AuditOptions, block: int, path: str = "") -> None:
        self.opts = opts
        self.path = path
        self.lines = 0  # JSONL: lines in the block (sources are 0-based line offsets within it until merged)
        self.rows = self.turns = self.missing = self.failing_rows = self.failing_turns = 0
        self.by_reason: Counter[str] = Counter()
        self.turns_by_reason: Counter[str] = Counter()
        self.by_turn: dict[int, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}  # every value of the block: at most its rows
        self.examples = Examples(random.Random(f"{opts.seed}:{block}"), opts.examples)
        self.lengths: dict[str, list[int]] = {"answer_chars": [], "reasoning_chars": []}
        self.failing: list[str | int] = []
        self.ids: list[tuple[str, str | int]] = []  # (id, source) of each row with an id, for the duplicate scan

    def add(self, result: RowAudit, data: Any, given: str | None, source: str | int) -> None:
        label: str | int = given if given is not None else self.rows
        if given is not None:
            self.ids.append((given, source))
        self.rows += 1
        reasons = result.reasons()
        if reasons:
            self.failing_rows += 1
            self.by_reason.update(reasons)
            self.failing.append(label)
        if result.bad:
            self.examples.offer(BAD_INPUT, {"id": label, "source": source, "detail": result.bad})
        for k, (turn, verdict) in enumerate(result.turns):
            self._turn(k, turn, verdict, label, source)
        if self.opts.by:
            self._group(data, reasons)

    def _turn(self, k: int, turn: StoredTurn, verdict: Verdict, label: str | int, source: str | int) -> None:
        self.turns += 1
        self.missing += turn.missing
        at = self.by_turn.get(k) or self.by_turn.setdefault(k, _new_turn())
        at["turns"] += 1
        if not turn.missing:
            self.lengths["answer_chars"].append(len(turn.answer))
            self.lengths["reasoning_chars"].append(len(turn.reasoning or ""))
        if verdict.ok:
            return
        reason = verdict.reason or ""
        self.failing_turns += 1
        self.turns_by_reason[reason] += 1
        at["failing"] += 1
        at["by_reason"][reason] += 1
        example = {"id": label, "source": source, "turn": k, "detail": verdict.detail}
        self.examples.offer(reason, lambda: {**example, **_texts(turn)})

    def _group(self, data: Any, reasons: list[str]) -> None:
        value = data.get(self.opts.by) if isinstance(data, dict) else None
        name = value if isinstance(value, str) else "(none)" if value is None else orjson.dumps(value).decode()
        group = self.groups.get(name) or self.groups.setdefault(name, _new_group())
        group["rows"] += 1
        group["failing_rows"] += bool(reasons)
        group["by_reason"].update(reasons)


def _new_turn() -> dict[str, Any]:
    return {"turns": 0, "failing": 0, "by_reason": Counter()}


def _new_group() -> dict[str, Any]:
    return {"rows": 0, "failing_rows": 0, "by_reason": Counter()}


_SUMS = ("rows", "turns", "missing", "failing_rows", "failing_turns")


class _Tally:
    """The whole audit: the blocks' counts merged in reading order, the group table capped at MAX_GROUPS values
    (the later ones under OTHER, as one pass would), lengths in fixed-size reservoirs."""

    def __init__(self, opts: AuditOptions) -> None:
        self.opts = opts
        self.total = _Part(opts, -1)
        self.examples = Examples(random.Random(opts.seed), opts.examples)
        self.lengths = {"answer_chars": Reservoir(opts.seed), "reasoning_chars": Reservoir(opts.seed + 1)}
        self.path, self.line = "", 1  # the file of the last block merged, and the line number its next block starts at
        # the ids met so far, as 64-bit hashes: 8 bytes an id, not the ids themselves
        self.seen = SeenHashes()
        self.repeated: set[int] = set()  # the ids met more than once
        self.repeated_rows = 0  # rows whose id an earlier row has
        self.repeats: list[dict[str, str]] = []  # the first DUPLICATE_EXAMPLES of them

    def merge(self, part: _Part) -> list[str]:
        """Add one block's counts; returns the labels of its failing rows (`row:<n>` numbered over all rows)."""
        t, offset = self.total, self.total.rows
        if part.path != self.path:
            self.path, self.line = part.path, 1
        for name in _SUMS:
            setattr(t, name, getattr(t, name) + getattr(part, name))
        t.by_reason.update(part.by_reason)
        t.turns_by_reason.update(part.turns_by_reason)
        for k, at in part.by_turn.items():
            into = t.by_turn.get(k) or t.by_turn.setdefault(k, _new_turn())
            into["turns"] += at["turns"]
            into["failing"] += at["failing"]
            into["by_reason"].update(at["by_reason"])
        for name, group in part.groups.items():
            if name not in t.groups and len(t.groups) >= MAX_GROUPS:
                name = OTHER
            into = t.groups.get(name) or t.groups.setdefault(name, _new_group())
            into["rows"] += group["rows"]
            into["failing_rows"] += group["failing_rows"]
            into["by_reason"].update(group["by_reason"])
        self.examples.merge(
            part.examples, functools.partial(_placed, offset=offset, file=f"{part.path}:", line=self.line)
        )
        self._duplicates(part)
        self.line += part.lines
        for name, values in part.lengths.items():
            self.lengths[name].extend(values)
        return [label if isinstance(label, str) else f"row:{offset + label}" for label in part.failing]

    def _duplicates(self, part: _Part) -> None:
        """Ids met before (in this file or an earlier one): `regen run` refuses such a file unless input.dedupe."""
        hashes = id_hashes(given for given, _ in part.ids)
        for k in self.seen.repeats(hashes):
            given, source = part.ids[k]
            self.repeated.add(int(hashes[k]))
            self.repeated_rows += 1
            if len(self.repeats) < DUPLICATE_EXAMPLES:
                where = f"{part.path}:{self.line + source}" if isinstance(source, int) else source
                self.repeats.append({"id": given, "again": where})

    def report(self) -> dict[str, Any]:
        t = self.total
        rows = t.rows
        return {
            "rows": rows,
            "assistant_turns": t.turns,
            "missing_turns": t.missing,
            "failing_rows": t.failing_rows,
            "failing_share": t.failing_rows / rows if rows else 0.0,
            "failing_turns": t.failing_turns,
            "by_reason": _sorted(t.by_reason),
            "by_reason_share": {k: v / rows for k, v in _sorted(t.by_reason).items()},
            "turns_by_reason": _sorted(t.turns_by_reason),
            "by_turn": {str(k): {**v, "by_reason": _sorted(v["by_reason"])} for k, v in sorted(t.by_turn.items())},
            "by": self.opts.by or None,
            "groups": {
                k: {**v, "failing_share": v["failing_rows"] / v["rows"], "by_reason": _sorted(v["by_reason"])}
                for k, v in sorted(t.groups.items(), key=lambda kv: -kv[1]["rows"])
            },
            "lengths": {name: r.percentiles() for name, r in self.lengths.items()},
            "histograms": {name: r.histogram() for name, r in self.lengths.items()},
            "examples": self.examples.chosen(),
            "duplicate_ids": {"rows": self.repeated_rows, "ids": len(self.repeated), "examples": self.repeats},
            "thinking": self.opts.thinking,
            "seed": self.opts.seed,
        }


def _sorted(counts: Counter[str]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _texts(turn: StoredTurn) -> dict[str, Any]:
    return {"answer": _clip(turn.answer), "reasoning": _clip(turn.reasoning or ""), "style": turn.style}


def _clip(text: str) -> str:
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS // 2] + " … " + text[-EXAMPLE_CHARS // 2 :]


def _placed(example: dict[str, Any], offset: int, file: str, line: int) -> dict[str, Any]:
    """An example of a block with its row and line numbers counted over the whole input."""
    row, source = example["id"], example["source"]
    if isinstance(row, int):
        example = {**example, "id": f"row:{offset + row}"}
    if isinstance(source, int):
        example = {**example, "source": f"{file}{line + source}"}
    return example


# ---------------------------------------------------------------- the id list


class _IdsFile:
    """The failing ids, one a line, written to a hidden file and renamed into place when the audit completes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp") if path else None
        self.fh: IO[str] | None = None

    def __enter__(self) -> _IdsFile:
        if self.tmp is not None:
            try:
                self.fh = self.tmp.open("w", encoding="utf-8")
            except OSError as exc:
                raise OutputError(f"{self.path}: cannot write the id list: {exc}") from None
        return self

    def write(self, label: str) -> None:
        if self.fh is not None:
            self.fh.write(label + "\n")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if self.fh is None or self.tmp is None or self.path is None:
            return
        self.fh.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def read_ids(path: Path) -> frozenset[str]:
    """The ids of an `--ids-out` file (or any list of ids, one a line; blank lines are skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the id list: {exc}") from None
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


# ---------------------------------------------------------------- text


def format_audit(r: dict[str, Any]) -> str:
    """The report as a few lines for a terminal."""
    rows = r["rows"]
    lines = [
        f"audited {rows:,} rows, {r['assistant_turns']:,} assistant turns ({r['missing_turns']:,} missing) "
        f"in {len(r['files'])} files, {r['elapsed_s']:.1f} s",
        f"failing: {r['failing_rows']:,} rows ({r['failing_share']:.1%}), {r['failing_turns']:,} turns",
    ]
    lines += [f"  {k:<24} {v:>9,} rows ({r['by_reason_share'][k]:.1%})" for k, v in r["by_reason"].items()]
    if len(r["by_turn"]) > 1:
        lines.append("by turn:")
        for k, t in r["by_turn"].items():
            reasons = ", ".join(f"{name} {n:,}" for name, n in t["by_reason"].items())
            lines.append(f"  turn {k}: {t['failing']:,} of {t['turns']:,} failing{': ' + reasons if reasons else ''}")
    if r["by"]:
        lines.append(f"by {r['by']}:")
        for name, g in list(r["groups"].items())[:20]:
            lines.append(f"  {name[:30]:<30} {g['failing_rows']:>9,} of {g['rows']:,} rows ({g['failing_share']:.1%})")
    for name, p in r["lengths"].items():
        if p["count"]:
            lines.append(f"{name}: p10 {p['p10']:,.0f}  p50 {p['p50']:,.0f}  p90 {p['p90']:,.0f}  max {p['max']:,.0f}")
    for reason, examples in r["examples"].items():
        for ex in examples[:1]:
            lines.append(f"example {reason}: {ex['id']} ({ex['source']}): {ex['detail']}")
    return "\n".join(lines + _duplicate_lines(r["duplicate_ids"]) + _no_reasoning_hint(r))


def _duplicate_lines(dup: dict[str, Any]) -> list[str]:
    """Repeated ids: `regen run` refuses the file for them, so the audit says so first."""
    if not dup["rows"]:
        return []
    shown = "; ".join(f"{d['id']!r} again at {d['again']}" for d in dup["examples"])
    return [
        f"duplicate ids: {dup['rows']:,} rows repeat an earlier row's id ({dup['ids']:,} ids): {shown}",
        "  regen run refuses this file; set input.dedupe = true to keep the first row of each id, or fix the ids",
    ]


def _no_reasoning_hint(r: dict[str, Any]) -> list[str]:
    """When (nearly) every failing row fails only for its missing reasoning, the dataset was made without thinking."""
    missing = r["by_reason"].get("empty_reasoning", 0)
    if not r.get("thinking", True) or not r["failing_rows"] or missing < 0.9 * r["failing_rows"]:
        return []
    return [
        f"hint: {missing:,} rows fail for want of reasoning: a dataset made without thinking. `--no-thinking` "
        "judges the answers alone; a thinking-mode regeneration (regen run, select all) adds the reasoning"
    ]
