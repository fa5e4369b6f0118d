"""Loud refusals: a dataset the config cannot read stops the run before anything is sent, not after 902K rejects.

Rows the reader cannot turn into a prompt are `bad_input` rejects: data, and a run with a few of them is a good
run. A run whose first rows are mostly `bad_input` is a config that does not match its dataset (a ShareGPT file
read as `messages`, parts under a key regen does not read, a wrong column name). `check_first_rows` reads the
first `FIRST_ROWS` rows of the input (whichever worker owns them: the shape is the dataset's) and raises InputError
(exit 2, nothing written) when more than `input.max_bad_share` of them are refused, naming the most common reasons
and the fix each suggests. `refused_summary` is what a finished run says about its refusals.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable

from ..config import InputConfig
from ..errors import InputError
from ..inputs.sniff import BATCH_KEYS, first_rows
from ..records import BadInput, Prompt

FIRST_ROWS = 1000
LARGE_SHARE = 0.1  # a finished run warns when more than this share of its rows were refused
_INDEX = re.compile(r"\[\d+\]")


def check_first_rows(
    batches: Iterable[list[Prompt | BadInput]], inp: InputConfig, path: str, fields: Callable[[], Iterable[str]]
) -> None:
    """Raise InputError when more than `inp.max_bad_share` of the first FIRST_ROWS rows are bad_input.

    `batches` is the reader's stream of `path` (only its first FIRST_ROWS items are read); `fields()` gives the
    columns of the first rows, which the hints name (read only when the run is refused). Each hint names the key to
    change; none sends the user to `regen init`, which may be what wrote this config (issue 38)."""
    if inp.max_bad_share >= 1:
        return
    first = list(itertools.islice(itertools.chain.from_iterable(batches), FIRST_ROWS))
    bad = [item for item in first if isinstance(item, BadInput)]
    if not first or len(bad) <= inp.max_bad_share * len(first):
        return
    reasons = Counter(_INDEX.sub("[i]", item.detail) for item in bad).most_common(3)
    columns = set(fields())
    lines = [f"{len(bad)} of the first {len(first)} rows cannot be read (bad_input); nothing was sent. Most common:"]
    for reason, n in reasons:
        lines.append(f"  {n} rows: {reason} (e.g. {next(b.source for b in bad if _same(b, reason))})")
        if fix := fix_for(reason, inp, columns):
            lines.append(f"    fix: {fix}")
    lines.append("(to send the rows that can be read anyway: --set input.max_bad_share=1)")
    raise InputError("\n".join(lines))


def _same(item: BadInput, reason: str) -> bool:
    return _INDEX.sub("[i]", item.detail) == reason


def fix_for(reason: str, inp: InputConfig, fields: set[str]) -> str:
    """The config change a refusal reason suggests, or ""."""
    shown = ", ".join(sorted(fields)[:12]) or "none"
    if reason.startswith("no ") and reason.endswith(" field"):
        if BATCH_KEYS <= fields:
            return 'input.format = "openai-batch" (the rows are OpenAI Batch lines: custom_id, method, url, body)'
        if inp.messages_field != "auto" and {"messages", "conversations"} & fields:
            found = "conversations (ShareGPT)" if "conversations" in fields else "messages"
            return f'input.messages_field = "auto" (the rows hold {found}, not {inp.messages_field!r})'
        return (
            f"the rows' fields are {shown}: name the conversation's (input.messages_field) or a plain prompt's "
            "(input.prompt_field)"
        )
    if " part" in reason:
        return "content parts regen does not read: text parts are {type: text, text: ...} (docs/conversations.md)"
    if reason.startswith(f"{inp.id_field} ") or reason.startswith(f"{inp.id_field}:"):
        return f"input.id_field = {inp.id_field!r} does not hold usable ids (fields: {shown}); name another"
    if ".from must be" in reason or ".role must be" in reason or "tool" in reason:
        return "a role or turn regen does not send: see docs/conversations.md for the shapes read"
    return ""


def refused_summary(rejected_by_reason: dict[str, int], finished: int) -> str | None:
    """A warning for a finished run whose refused share is large, or None."""
    refused = rejected_by_reason.get("bad_input", 0)
    if not finished or refused <= LARGE_SHARE * finished:
        return None
    return (
        f"{refused} of {finished} rows ({100 * refused / finished:.0f}%) were refused as bad_input and never sent: "
        "`regen inspect RUN_DIR --reason bad_input` shows why"
    )


def first_row_fields(path: str, rows: int = 20) -> set[str]:
    """The columns of the input's first rows (for the hints)."""
    _, data = first_rows(path, rows)
    return {key for row in data if isinstance(row, dict) for key in row}
