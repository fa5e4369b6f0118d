"""The export formats, one exporter each, behind one registry: `regen export --format NAME` and `regen.export(run,
NAME, out, ...)` both find the format here (`exporter_for`), and nothing else decides which code writes it.

- `chat`, `sharegpt`, `specforge`, `prompt-completion`, `openai-batch-output` and `tokenized` (`RowsExporter`, options
  `ExportOptions`): the run's rows in a trainer's shape, streamed by export.py into `out/data/train-*` (and
  `rejects-*` when asked) with a dataset card; rows shaped by formats.py (tokenized.py: `tokenizer` required);
  returns the export summary.
- `repaired` (`RepairExporter`, options `RepairOptions`): the original dataset written back whole, with
  repair-rows.jsonl, a card and repair-report.json (repair.py); returns the repair report.

A training format is data: the reasoning mode it writes when none is asked, the file format it always writes (if it
fixes one), whether it expands turns, and the converter that shapes its rows. Each exporter names its options record
(`options`) and builds it from a mapping that may hold more (`options_from`: the CLI's flags, the API's keywords),
taking the names the record has and leaving those of other formats.

Nothing heavy is imported here: the writers (pyarrow, numpy; transformers for `tokenized`) load when an export runs,
so the CLI reads `NAMES` for `--format` at no cost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..errors import ConfigError
from .shapes import REASONING_MODES, Style

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from .export import ExportOptions
    from .formats import Format
    from .repair import RepairOptions

FILE_FORMATS = ("parquet", "jsonl")
T = TypeVar("T", bound="DataclassInstance")


class Exporter(Protocol):
    """One export format: its name, its options record, and the export itself."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> type[Any]: ...

    def options_from(self, given: Mapping[str, Any]) -> Any: ...

    def export(self, run_dir: Path, out: Path, options: Any) -> dict[str, Any]: ...


def _picked(record: type[T], given: Mapping[str, Any]) -> T:
    """`record` built from the items of `given` it has a field for (the rest belong to other formats)."""
    names = {f.name for f in dataclasses.fields(record)}
    return record(**{key: value for key, value in given.items() if key in names})


# The converter of a training format: (format name, reasoning style, options, the run's generation.thinking).
MakeConverter = Callable[[str, Style, "ExportOptions", bool], "Format"]


def _conversations(name: str, style: Style, options: ExportOptions, thinking: bool) -> Format:
    if options.tokenizer is not None or options.chat_template is not None:
        raise ConfigError("--tokenizer and --chat-template are for --format tokenized")
    from .formats import Converter

    return Converter(name, style, expand_turns=options.expand_turns, thinking=thinking)


def _batch_lines(name: str, style: Style, options: ExportOptions, thinking: bool) -> Format:
    """Batch output lines hold no conversation: the style, and the tokenizer options, do not apply (not refused)."""
    from .formats import BatchOutput

    return BatchOutput()


def _tokens(name: str, style: Style, options: ExportOptions, thinking: bool) -> Format:
    if options.tokenizer is None:
        raise ConfigError("--format tokenized needs --tokenizer DIR (a local tokenizer folder; nothing is downloaded)")
    from .tokenized import TokenizedConverter  # transformers is needed by this format only

    return TokenizedConverter(
        options.tokenizer, options.chat_template, style, expand_turns=options.expand_turns, thinking=thinking
    )


@dataclass(frozen=True, slots=True)
class RowsExporter:
    """A training format: the run's rows, shaped by `converter`, into `out/data/` with a dataset card (export.py)."""

    name: str
    converter: MakeConverter
    reasoning: str = "field"  # the reasoning mode when none is asked
    file_format: str | None = None  # the file format it always writes (None: the one asked)
    expandable: bool = True  # takes --expand-turns

    @property
    def options(self) -> type[ExportOptions]:
        from .export import ExportOptions

        return ExportOptions

    def options_from(self, given: Mapping[str, Any]) -> ExportOptions:
        return _picked(self.options, given)

    def checked(self, options: ExportOptions) -> ExportOptions:
        """ConfigError for an option this format cannot honour; else the options with the reasoning mode and file
        format it will write."""
        if options.file_format not in FILE_FORMATS:
            raise ConfigError(f"unknown file format {options.file_format!r}; choose parquet or jsonl")
        if options.rows_per_file < 1:
            raise ConfigError(f"rows_per_file must be at least 1, got {options.rows_per_file}")
        reasoning = options.reasoning or self.reasoning
        if reasoning not in REASONING_MODES:
            raise ConfigError(f"unknown reasoning mode {reasoning!r}; choose one of {', '.join(REASONING_MODES)}")
        if options.expand_turns and not self.expandable:
            expandable = ", ".join(e.name for e in EXPORTERS.values() if isinstance(e, RowsExporter) and e.expandable)
            raise ConfigError(f"--expand-turns works with {expandable}, not {self.name}")
        return replace(options, reasoning=reasoning, file_format=self.file_format or options.file_format)

    def export(self, run_dir: Path, out: Path, options: ExportOptions) -> dict[str, Any]:
        """Returns `{format, file_format, reasoning, expand_turns, files, rows, rejected_rows, skipped, notes,
        data_files, damaged, duplicates_skipped, card}` (export.py's `export_rows`)."""
        from .export import export_rows

        _check_type(self, options)
        return export_rows(run_dir, out, self.checked(options), name=self.name, converter=self.converter)


@dataclass(frozen=True, slots=True)
class RepairExporter:
    """The original dataset written back whole, the rows the run regenerated carrying their new turns (repair.py)."""

    name: str = "repaired"

    @property
    def options(self) -> type[RepairOptions]:
        from .repair import RepairOptions

        return RepairOptions

    def options_from(self, given: Mapping[str, Any]) -> RepairOptions:
        return _picked(self.options, given)

    def export(self, run_dir: Path, out: Path, options: RepairOptions) -> dict[str, Any]:
        """Returns the repair report (also written to out/repair-report.json: repair.py's `export_repaired`)."""
        from .repair import export_repaired

        _check_type(self, options)
        return export_repaired(run_dir, out, options)


def _check_type(exporter: Exporter, options: object) -> None:
    if not isinstance(options, exporter.options):
        raise TypeError(f"--format {exporter.name} takes {exporter.options.__name__}, not {type(options).__name__}")


EXPORTERS: dict[str, Exporter] = {
    e.name: e
    for e in (
        RowsExporter("chat", _conversations),
        RowsExporter("sharegpt", _conversations, reasoning="inline"),  # inline, as ShareGPT's readers expect
        RowsExporter("specforge", _conversations, file_format="jsonl"),
        RowsExporter("prompt-completion", _conversations),
        RowsExporter("tokenized", _tokens, file_format="parquet"),
        RowsExporter("openai-batch-output", _batch_lines, file_format="jsonl", expandable=False),
        RepairExporter(),
    )
}
NAMES = tuple(EXPORTERS)


def exporter_for(name: str) -> Exporter:
    """The exporter of format `name`; ConfigError naming the formats when there is none."""
    if name not in EXPORTERS:
        raise ConfigError(f"unknown export format {name!r}; choose one of {', '.join(NAMES)}")
    return EXPORTERS[name]


def option_names() -> set[str]:
    """Every name an exporter's options record has (a keyword no format takes is a mistake)."""
    return {f.name for e in EXPORTERS.values() for f in dataclasses.fields(e.options)}


def export(run_dir: Path, format: str, out: Path, options: Any = None) -> dict[str, Any]:
    """Export `run_dir` as `format` into `out` with the format's options record (its defaults when None); returns
    what the format's exporter returns (the table above)."""
    exporter = exporter_for(format)
    return exporter.export(run_dir, out, exporter.options() if options is None else options)
