"""regen: batch completion generation for thinking-mode LLM datasets against SGLang endpoints.

The public API is exactly `__all__`; submodules load on first use so `import pipeline` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import Config, load_config
from .errors import (
    ConfigDriftError,
    ConfigError,
    EndpointError,
    InputError,
    Interrupted,
    LockedError,
    OutputError,
    PreflightError,
    RegenError,
)

__version__ = "0.1.0"

# name -> the module that defines it, imported on first use (a test resolves every one)
_LAZY = {
    "run": "engine.runner",
    "RunOptions": "engine.runner",
    "RunSummary": "engine.runner",
    "inspect_run": "inspection",
    "run_status": "inspection",
    "validate_run": "inspection",
    "preflight": "server.preflight",
}

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
    "RunOptions",
    "RunSummary",
    "__version__",
    "inspect_run",
    "load_config",
    "preflight",
    "run",
    "run_status",
    "validate_run",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
