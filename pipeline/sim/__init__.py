"""The SGLang simulator: an HTTP server that behaves like SGLang on the wire (shared/SGLANG.md).

`serve(config)` runs one in-process (an async context manager yielding the base URL), and `embedded(sim_args)` the
one an endpoint `url = "sim"` asks for, from its `regen sim` flags (what the composition roots, the CLI and the
public API, hand the runner and preflight: production code does not import the simulator); `regen sim` runs one as
a process (`add_arguments`, `config_from_args`, `run_forever`). What each SGLang release accepts and resolves is not
the simulator's: it plays the rules of `pipeline.sglang` (`resolve`, re-exported here, and `SimStartupError`, the
name the simulator gives SGLang's startup refusal). `prompt_key` is the key `/_sim/stats` counts generations under.
"""

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from ..sglang.resolution import StartupRefused as SimStartupError
from ..sglang.resolution import resolve
from .text import prompt_key

_SERVER = frozenset({"SimConfig", "add_arguments", "config_from_args", "run_forever", "serve"})


def embedded(sim_args: Sequence[str]) -> AbstractAsyncContextManager[str]:
    """The simulator of an endpoint `url = "sim"`, served on this event loop while the context lasts (it yields the
    base URL). Raises SimStartupError, here or on entering, when SGLang would refuse `sim_args`."""
    from .server import SimConfig, serve

    return serve(SimConfig.from_argv(list(sim_args)))


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
    "embedded",
    "prompt_key",
    "resolve",
    "run_forever",
    "serve",
]
