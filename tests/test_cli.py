"""The CLI as a user meets it: --help for every subcommand, exit codes, and the README (plus the docs/ pages it
links) agreeing with --help."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from pipeline.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = README + "".join(page.read_text() for page in DOC_PAGES)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_for_every_subcommand(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: regen {command}")
    assert f"regen {command}" in README, f"README never shows `regen {command}`"


def test_readme_documents_every_run_option() -> None:
    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    flags = {opt for action in run._actions for opt in action.option_strings if opt.startswith("--")} - {"--help"}
    missing = sorted(f for f in flags if f not in README)
    assert missing == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_docs_document_every_option(command: str) -> None:
    """Each subcommand's flags appear in the README or the docs/ page it links (the details moved there)."""
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    flags = {opt for action in sub._actions for opt in action.option_strings if opt.startswith("--")} - {"--help"}
    assert sorted(f for f in flags if f not in DOCS) == []


def test_readme_links_every_docs_page_and_no_missing_one() -> None:
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)", README))
    pages = {f"docs/{page.name}" for page in DOC_PAGES}
    assert sorted(pages - linked) == [], "docs pages the README does not link"
    assert sorted(linked - pages) == [], "README links to docs pages that do not exist"


def test_readme_documents_every_config_key() -> None:
    from pipeline.config import Config

    cfg = Config().to_dict()
    keys = [f"{section}.{key}" for section, value in cfg.items() if isinstance(value, dict) for key in value]
    keys = [k for k in keys if not k.startswith(("expect.", "launch."))]
    undocumented = [k for k in keys if k.split(".")[1] not in README]
    assert undocumented == []


def test_bad_config_exit_code_and_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[output]\nshard_row = 5\n")
    assert main(["run", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"unknown key 'output.shard_row'; did you mean 'output.shard_rows'\?", err)


def test_worker_index_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "configs/demo.toml", "--worker-index", "3", "--num-workers", "2", "--no-progress"]) == 2
    assert "--worker-index 3 must be in [0, 2)" in capsys.readouterr().err


def test_a_closed_pipe_is_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`regen inspect RUN --json | head -1`: when the reader leaves, regen stops quietly (exit 141, as SIGPIPE)."""
    from tests.helpers.inspection_runs import build_run

    class ClosedPipe:
        def __init__(self) -> None:
            self.sink = open(os.devnull, "w")

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return self.sink.fileno()

        def flush(self) -> None:
            pass

    pipe = ClosedPipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    try:
        assert main(["inspect", str(build_run(tmp_path)), "--json"]) == 141
    finally:
        pipe.sink.close()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"regen {version('regen')}\n"
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
