"""Run inspection: status, inspect, validate and the HTML report, over a RUN_DIR only.

Every function returns plain data (dicts of JSON-able values) or a string; nothing here prints, writes into the
RUN_DIR or talks to an endpoint (`validate --quarantine` is a store operation: `validate_run` is re-exported from
`pipeline.store.quarantine`). Reading is streaming and column-selective, so a 1M-row run answers in seconds with
little memory; matplotlib loads only when `write_html` draws the report.
"""

from __future__ import annotations

from ..store.quarantine import validate_run
from .report import write_html
from .status import run_status
from .summary import inspect_run
from .textview import format_inspect, format_status, format_validate
from .where import WhereError, parse_where

__all__ = [
    "WhereError",
    "format_inspect",
    "format_status",
    "format_validate",
    "inspect_run",
    "parse_where",
    "run_status",
    "validate_run",
    "write_html",
]
