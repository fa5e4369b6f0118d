"""regen: batch completion generation for thinking-mode LLM datasets, as a library.

`import regen` is the documented Python API (regen/api.py): run a config (a TOML path or a dict) and get its
summary, preflight servers, audit a dataset, export a run, read a run's rows. The command line (`regen ...`,
`python -m pipeline ...`) does the same; the implementation lives in the `pipeline` package.
"""

from pipeline import (
    Config,
    ConfigDriftError,
    ConfigError,
    EndpointError,
    InputError,
    Interrupted,
    LockedError,
    OutputError,
    PreflightError,
    RegenError,
    __version__,
)
from regen.api import audit, dataset, export, inspect, load, preflight, rows, run, status, validate

__all__ = [
    "Config",
    "ConfigDriftError",
    "ConfigError",
    "EndpointError",
    "InputError",
    "Interrupted",
    "LockedError",
    "OutputError",
    "PreflightError",
    "RegenError",
    "__version__",
    "audit",
    "dataset",
    "export",
    "inspect",
    "load",
    "preflight",
    "rows",
    "run",
    "status",
    "validate",
]
