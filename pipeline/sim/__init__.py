"""The SGLang simulator: an HTTP server that behaves like SGLang on the wire (shared/SGLANG.md).

`serve(config)` runs one in-process (an async context manager yielding the base URL); `regen sim` runs one as a
process (`add_arguments`, `config_from_args`, `run_forever`). What each SGLang release accepts and resolves is not
the simulator's: it plays the rules of `pipeline.sglang` (`resolve`, re-exported here, and `SimStartupError`, the
name the simulator gives SGLang's startup refusal). `prompt_key` is the key `/_sim/stats` counts generations under.
"""

from typing import Any

from ..sglang.resolution import StartupRefused as SimStartupError
from ..sglang.resolution import resolve
from .text import prompt_key

_SERVER = frozenset({"SimConfig", "add_arguments", "config_from_args", "run_forever", "serve"})


def __getattr__(name: str) -> Any:
    """The server half (aiohttp.web, ~0.1 s of imports) only when asked for: `regen run` never serves unless a
    config says `url = "sim"`."""
    if name in _SERVER:
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SimConfig",
    "SimStartupError",
    "add_arguments",
    "config_from_args",
    "prompt_key",
    "resolve",
    "run_forever",
    "serve",
]
