"""The README against the code it describes, as tests/test_architecture.py holds docs/architecture.md to the tree:
the RUN_DIR listing against pipeline/store/layout.py, the column and reason tables against pipeline/schema.py, the
command table against the CLI's parser. A folder, column, reason or subcommand added, renamed or removed fails here
until the README says so."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pipeline import schema
from pipeline.cli import build_parser, sim_parser
from pipeline.store.layout import RunLayout

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(heading: str) -> str:
    """The README's text under `heading` (a `#`-line), up to the next heading of the same level or above."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n", README, re.M)
    assert match is not None, f"the README has no section {heading!r}"
    level = len(match[1])
    rest = README[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def _table(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the Markdown table in `text` whose header row begins with `| header |`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"| {header} |")), None)
    assert start is not None, f"no table with a {header!r} column"
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def _first_name(cell: str) -> str:
    found = re.match(r"`([^`]+)`", cell)
    assert found is not None, f"a row that does not start with a `name`: {cell!r}"
    return found[1]


def test_the_run_dir_listing_is_the_layout() -> None:
    """Every entry `RunLayout` names (its properties: run.json and each folder) is in the listing, and no other."""
    block = re.search(r"```\nRUN_DIR/\n(.*?)```", _section("Output: the RUN_DIR"), re.S)
    assert block is not None, "no RUN_DIR/ listing"
    listed = [re.split(r"[/\s]", line.strip(), maxsplit=1)[0] for line in block[1].splitlines() if line.strip()]
    root = Path("RUN_DIR")
    layout = RunLayout(root)
    names = [name for name, value in vars(RunLayout).items() if isinstance(value, property)]
    defined = sorted(getattr(layout, name).relative_to(root).as_posix() for name in names)
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == defined


def test_the_column_table_is_the_schema() -> None:
    """The columns in the schema's order (shards' then the rejects' two), the schema version, and each turn's
    fields as the `turns` row names them."""
    text = _section("Output: the RUN_DIR")
    version = re.search(r"^Columns \(schema (\d+)", text, re.M)
    assert version is not None and int(version[1]) == schema.SCHEMA_VERSION
    rows = _table(text, "column")
    documented = [_first_name(row[0]) for row in rows]
    assert documented == [f.name for f in schema.BASE_FIELDS + schema.REJECT_FIELDS]
    turns = next(row[1] for row in rows if _first_name(row[0]) == "turns")
    named = set(re.findall(r"`(\w+)`", turns))
    assert named == set(schema.TURN_KEYS)


def test_the_reason_table_is_the_schemas_precedence() -> None:
    rows = _table(_section("Output: the RUN_DIR"), "reason")
    assert [_first_name(row[0]) for row in rows] == list(schema.REASONS)


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    choices: dict[str, argparse.ArgumentParser] = dict(action.choices)
    choices["sim"] = sim_parser()  # `regen sim`'s flags are its own parser (it imports the simulator)
    return choices


def test_the_command_table_is_the_cli() -> None:
    """One row or more per subcommand of the parser and none for a command it lacks; every --flag a row shows is
    one of that subcommand's."""
    commands = _subcommands()
    rows = _table(_section("Commands"), "command")
    used: dict[str, list[str]] = {}
    for row in rows:
        usage = _first_name(row[0])
        found = re.match(r"regen (\w+)", usage)
        assert found is not None, f"a command row that is not `regen COMMAND ...`: {usage!r}"
        used.setdefault(found[1], []).append(usage)
    assert sorted(used) == sorted(commands)
    unknown = []
    for name, usages in used.items():
        flags = {opt for action in commands[name]._actions for opt in action.option_strings}
        unknown += [f"{name} {f}" for usage in usages for f in re.findall(r"--[\w-]+", usage) if f not in flags]
    assert unknown == []


def test_the_readme_states_no_test_count() -> None:
    """A count of tests goes stale with the next test; timings carry their date instead."""
    assert re.findall(r"[\d,]+ tests\b", README) == []
