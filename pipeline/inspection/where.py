"""`--where`: a small column-condition language parsed into a pyarrow compute expression (never `eval`).

    condition  := clause (("and" | "or") clause)*        evaluated left to right, "and" binding tighter
    clause     := column OP literal | column "is" ["not"] "null"
    OP         := == != < <= > >= contains startswith
    literal    := 123 | 1.5 | 'text' | "text" | true | false

Columns are the schema's, plus `answer_chars` and `reasoning_chars` (text lengths in characters).
Examples: `completion_tokens > 1000`, `finish_reason == 'length'`, `answer_chars < 20 and endpoint contains '8001'`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from ..errors import ConfigError

VIRTUAL = {"answer_chars": "answer", "reasoning_chars": "reasoning"}

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<op>==|!=|<=|>=|<|>|=)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)


class WhereError(ConfigError):
    """A --where condition that does not parse or names an unknown column."""

    exit_code = 2


@dataclass(frozen=True)
class Where:
    expression: pc.Expression
    columns: frozenset[str]  # stored columns the condition reads
    text: str


def parse_where(text: str, known_columns: set[str] | frozenset[str]) -> Where:
    tokens = _tokens(text)
    columns: set[str] = set()
    pos = 0
    disjuncts: list[pc.Expression] = []
    conjuncts: list[pc.Expression] = []
    while True:
        expr, pos = _clause(tokens, pos, known_columns, columns, text)
        conjuncts.append(expr)
        if pos == len(tokens):
            break
        joiner = tokens[pos][1].lower()
        if joiner not in ("and", "or"):
            raise WhereError(f"--where {text!r}: expected 'and' or 'or' before {tokens[pos][1]!r}")
        if joiner == "or":
            disjuncts.append(_all(conjuncts))
            conjuncts = []
        pos += 1
    disjuncts.append(_all(conjuncts))
    result = disjuncts[0]
    for other in disjuncts[1:]:
        result = result | other
    return Where(result, frozenset(columns), text)


def _all(exprs: list[pc.Expression]) -> pc.Expression:
    result = exprs[0]
    for other in exprs[1:]:
        result = result & other
    return result


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise WhereError(f"--where {text!r}: cannot read from {text[pos:].strip()!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    if not out:
        raise WhereError("--where: empty condition")
    return out


def _clause(
    tokens: list[tuple[str, str]], pos: int, known: set[str] | frozenset[str], columns: set[str], text: str
) -> tuple[pc.Expression, int]:
    if not _is_null_test(tokens, pos) and pos + 2 >= len(tokens):
        raise WhereError(f"--where {text!r}: expected 'column OP value', e.g. completion_tokens > 1000")
    kind, name = tokens[pos]
    if kind != "word" or (name not in known and name not in VIRTUAL):
        valid = ", ".join(sorted(set(known) | set(VIRTUAL)))
        raise WhereError(f"--where {text!r}: unknown column {name!r}; columns: {valid}")
    field = _field(name, columns)
    if _is_null_test(tokens, pos):
        negate = tokens[pos + 2][1].lower() == "not"
        end = pos + (4 if negate else 3)
        return (~pc.is_null(field) if negate else pc.is_null(field)), end
    op = tokens[pos + 1][1].lower()
    value = _literal(tokens[pos + 2], text)
    return _compare(field, op, value, text), pos + 3


def _is_null_test(tokens: list[tuple[str, str]], pos: int) -> bool:
    words = [t[1].lower() for t in tokens[pos + 1 : pos + 4]]
    return words[:2] == ["is", "null"] or words[:3] == ["is", "not", "null"]


def _field(name: str, columns: set[str]) -> pc.Expression:
    if name in VIRTUAL:
        columns.add(VIRTUAL[name])
        return pc.utf8_length(pc.field(VIRTUAL[name]))
    columns.add(name)
    return pc.field(name)


def _literal(token: tuple[str, str], text: str) -> Any:
    kind, raw = token
    if kind == "str":
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    if kind == "num":
        return float(raw) if any(c in raw for c in ".eE") else int(raw)
    if kind == "word" and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise WhereError(f"--where {text!r}: {raw!r} is not a value (quote strings: 'stop')")


def _compare(field: pc.Expression, op: str, value: Any, text: str) -> pc.Expression:
    if op in ("==", "="):
        return field == value
    if op == "!=":
        return field != value
    if op in ("<", "<=", ">", ">="):
        return {"<": field < value, "<=": field <= value, ">": field > value, ">=": field >= value}[op]
    if op in ("contains", "startswith") and isinstance(value, str):
        fn = pc.match_substring if op == "contains" else pc.starts_with
        return fn(field, value)
    raise WhereError(f"--where {text!r}: unknown operator {op!r}; use == != < <= > >= contains startswith")
