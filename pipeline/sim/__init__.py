"""The SGLang simulator: an HTTP server that behaves like SGLang on the wire (shared/SGLANG.md).

`serve(config)` runs one in-process (an async context manager yielding the base URL); `regen sim` runs one as a
process (`add_arguments`, `config_from_args`, `run_forever`). `resolve` is SGLang's server-arg resolution for a
simulated version; `prompt_key` is the key `/_sim/stats` counts generations under.
"""

from .args import SimStartupError, resolve
from .server import SimConfig, add_arguments, config_from_args, run_forever, serve
from .text import prompt_key

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
