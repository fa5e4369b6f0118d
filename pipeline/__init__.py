"""regen: batch completion generation for thinking-mode LLM datasets against SGLang endpoints.

The public API is exactly `__all__`; submodules load on first use so `import pipeline` stays cheap. `run` and
`preflight` are a composition root, as the CLI is: they hand the engine and preflight the embedded simulator
(`pipeline.sim.embedded`) that serves an endpoint `url = "sim"`, which those do not import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from .engine.runner import RunOptions, RunSummary
    from .engine.ticker import ProgressFn

__version__ = "0.1.0"

# name -> the module that defines it, imported on first use (a test resolves every one); `run` and `preflight` below
_LAZY = {
    "RunOptions": "engine.runner",
    "RunSummary": "engine.runner",
    "inspect_run": "inspection",
    "run_status": "inspection",
    "validate_run": "inspection",
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


def run(cfg: Config, options: RunOptions | None = None, on_progress: ProgressFn | None = None) -> RunSummary:
    """Run (or resume) the generation described by `cfg` (`regen run`). Raises a RegenError subclass on failure."""
    from .engine import runner
    from .sim import embedded

    options = options if options is not None else runner.RunOptions()
    return runner.run(cfg, options, on_progress, simulator=embedded)


async def preflight(
    cfg: Config, *, urls: list[str] | None = None, probe: bool = True, tools: bool = False
) -> dict[str, Any]:
    """Preflight every endpoint at once (`regen preflight --json`): {ok, endpoints: [...]}. `urls` replaces the
    config's endpoints; `tools`: the input has tools, so a server that parses no tool calls fails."""
    from .server.preflight import preflight as check
    from .sim import embedded

    return await check(cfg, urls=urls, probe=probe, tools=tools, simulator=embedded)
