"""`SimConfig`: every knob of the simulator, and the `regen sim` flags that set them (SGLang's spellings)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..sglang.flags import Flag, all_flags, flags_of
from ..sglang.releases import EMULATED
from ..sglang.resolution import MAMBA_STRATEGIES, check_flags, check_spec_algorithm
from ..sglang.resolution import StartupRefused as SimStartupError
from .faults import FaultRates

# Fields that are SGLang server_args (passed to `pipeline.sglang.resolution.resolve`); the rest are simulator knobs.
SERVER_ARG_FIELDS = (
    "model_path",
    "served_model_name",
    "context_length",
    "max_running_requests",
    "max_queued_requests",
    "reasoning_parser",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "mamba_scheduler_strategy",
    "mamba_radix_cache_strategy",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "page_size",
    "attention_backend",
    "enable_cache_report",
    "api_key",
    "enable_metrics",
    "tp_size",
    "max_mamba_cache_size",
    "architecture",
)
# The SGLang flags the simulator models (typed fields above); every other flag of the release lands in `extra_args`.
_MODELED = frozenset(
    {
        *(name.replace("_", "-") for name in SERVER_ARG_FIELDS if name != "architecture"),
        "tp",
        "host",
        "port",
    }
)
_EXTRA = "sglang:"  # argparse dest prefix of the flags kept as given (`extra_args`)


@dataclass(frozen=True)
class SimConfig(FaultRates):
    # SGLang launch flags (server_args names)
    model_path: str = "Qwen/Qwen3.6-27B"
    served_model_name: str | None = None
    context_length: int | None = None
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    reasoning_parser: str | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    mamba_scheduler_strategy: str | None = None
    mamba_radix_cache_strategy: str | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    page_size: int = 1
    attention_backend: str | None = None
    enable_cache_report: bool = False
    api_key: str | None = None
    enable_metrics: bool = False
    tp_size: int = 1
    max_mamba_cache_size: int | None = None  # None: SGLang sizes the mamba cache from GPU memory (see below)
    extra_args: Mapping[str, Any] = field(default_factory=dict)  # every other flag given, server_args name → value
    # which SGLang to be, and the model it pretends to serve
    version: str = "0.5.23"
    architecture: str | None = None  # None: derived from model_path (Qwen3.5/3.6/Next are hybrid mamba)
    env: Mapping[str, str] = field(default_factory=dict)  # SGLANG_* variables; the process environment fills gaps
    # generation model
    decode_tokens_per_s: float = 0.0  # aggregate at a full batch; 0 = instant
    mean_output_tokens: int = 1500
    seed: int = 0
    default_max_running_requests: int = 256  # the capacity SGLang would compute from memory when unset
    memory_mamba_cache_size: int = 1024  # the mamba cache SGLang would size from memory when unset
    prefill_tokens_per_s: float = 0.0  # uncached prompt tokens/s, one request at a time; 0 = instant
    prefix_cache_tokens: int = 1_048_576  # radix prefix cache size (LRU); SGLang's is the KV pool, max_total_num_tokens
    batch_half: float | None = None  # per-request speed ∝ 1/(batch + batch_half); None = max_running/4
    spec_accept_length: float | None = None  # mean accept length; None = 1 + 0.6 * (draft tokens - 1)
    stream_chunk_tokens: int = 8  # tokens per SSE chunk when generation is instant
    stream_chunk_chars: int = 0  # >0: every chat/completions stream delta carries this many characters (the last less)
    replies: str | None = None  # JSONL of scripted replies (prompt → reasoning, content): replies.py
    stream_interval_s: float = 0.02  # how often a timed stream flushes new tokens
    old_stream_shape: bool = False  # the 0.5.9 chunk shape (usage: null on every chunk); implied by version 0.5.9
    # lifecycle
    slow_start_s: float = 0.0  # port closed (connection refused) this long, as while SGLang loads weights
    warmup_s: float = 0.0  # then /health answers 503 this long
    health_delay_s: float = 0.0  # /health's own latency (real SGLang: ≥1 s for its 1-token generation)
    disconnect_check_s: float = 0.0  # 0: a non-streaming request's gone client is seen at once; see --disconnect-check
    drain_timeout_s: float = 60.0  # SIGTERM: longest wait for in-flight requests
    # faults: the probability of each kind per generation request is a FaultRates `p_*` field (inherited, keyword
    # only), drawn from (seed, prompt, attempt); the other fault knobs follow
    loop_share: float = 0.0  # thinking generations that fall into a verbatim loop part-way and run to max_tokens
    trickle_s: float = 0.0  # streams send one delta every S seconds: slow but alive
    die_after: int | None = None  # stop serving after N generation responses
    fail_503_after: int | None = None  # after N generation responses, answer every one with 503 (/health stays 200)
    fail_503_every_s: float = 0.0  # bursts: every S seconds after the port opens, 503 to everything for ...
    fail_503_for_s: float = 1.0  # ... this long (/health stays 200); 0 every = off
    down_after: int | None = None  # after N generation responses, refuse connections for down_for_s, then recover
    down_for_s: float = 5.0
    close_connections: bool = False  # close every connection right after its response, without saying so
    host: str = "127.0.0.1"
    port: int = 0
    launch_argv: tuple[str, ...] = ()

    @classmethod
    def from_argv(cls, argv: Sequence[str], env: Mapping[str, str] | None = None) -> SimConfig:
        """Parse `regen sim` flags. Flags the simulated version does not have raise SimStartupError (argparse kind).
        `env` holds SGLANG_* variables as the server would see them (the process environment fills gaps)."""
        parser = _RaisingParser(prog="regen sim", add_help=False)
        add_arguments(parser)
        ns = parser.parse_args(list(argv))
        config = _from_namespace(ns, tuple(argv))
        return config if env is None else config.replace(env=dict(env))

    def server_args(self) -> dict[str, Any]:
        """The launch args in server_args names, as `resolve` takes them (modeled ones, then the rest)."""
        return {**self.extra_args, **{name: getattr(self, name) for name in SERVER_ARG_FIELDS}}

    def replace(self, **changes: Any) -> SimConfig:
        return dataclasses.replace(self, **changes)


_FAULT_FLAGS = (  # one `--fail-*` flag per FaultRates field
    ("--fail-500", "p_500", "probability of an HTTP 500 (InternalServerError) before generating"),
    ("--fail-503", "p_503", "probability of an HTTP 503 'The request queue is full.' before generating"),
    ("--fail-reset", "p_reset", "probability of a connection reset in the middle of the response body"),
    ("--fail-hang", "p_hang", "probability of accepting the request and never answering"),
    ("--fail-empty", "p_empty", "probability of an empty completion (no content, no reasoning, finish stop)"),
    (
        "--fail-answer-in-reasoning",
        "p_answer_in_reasoning",
        "probability that the answer stays inside the think block (content empty, finish stop)",
    ),
    ("--fail-invalid-json", "p_invalid_json", "probability of a 200 whose body is not valid JSON"),
    (
        "--fail-stall",
        "p_stall",
        "probability of a stall: a stream sends its role chunk and a few deltas, then no more bytes (the connection "
        "stays open) until the client leaves or /abort_request names its rid; a non-streaming request hangs",
    ),
)


class _RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser for in-process use: a usage error raises SimStartupError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise SimStartupError(message, "argparse")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise SimStartupError(message or f"exit {status}", "argparse")


def _probability(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid probability: {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"probability must be in [0, 1], got {raw}")
    return value


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {raw!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"seconds must be at least 0, got {raw}")
    return value


def _count(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count: {raw!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"count must be at least 0, got {raw}")
    return value


def _bool_flag(parser: argparse._ActionsContainer, flag: str, help_text: str) -> None:
    parser.add_argument(flag, action="store_true", default=None, help=help_text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every `regen sim` flag: SGLang launch flags (SGLang spellings), simulator knobs and fault knobs."""
    _add_launch_flags(parser)
    _add_release_flags(parser)
    _add_simulator_flags(parser)
    _add_fault_flags(parser)
    parser.set_defaults(_sim_parser=parser)


def _add_launch_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("SGLang launch flags (reported by /server_info after version-specific resolution)")
    g.add_argument("--model-path", help="model to pretend to serve (default Qwen/Qwen3.6-27B, a hybrid-mamba arch)")
    g.add_argument("--served-model-name", help="name in /v1/models and /model_info (default: the model path)")
    g.add_argument("--context-length", type=int, help="context window in tokens (default by architecture)")
    g.add_argument("--max-running-requests", type=int, help="requests decoding at once; the rest wait in a queue")
    g.add_argument("--max-queued-requests", type=int, help="queue bound; beyond it 503 'The request queue is full.'")
    g.add_argument("--reasoning-parser", help="e.g. qwen3: split <think>…</think> into reasoning_content")
    g.add_argument(
        "--speculative-algorithm", help="enable speculative decoding (a fixed choice before 0.5.12, free text from it)"
    )
    g.add_argument("--speculative-num-steps", type=int, help="draft steps (auto when unset)")
    g.add_argument("--speculative-eagle-topk", type=int, help="EAGLE top-k (auto when unset)")
    g.add_argument("--speculative-num-draft-tokens", type=int, help="draft tokens (forced to steps+1 at topk 1)")
    g.add_argument(
        "--mamba-scheduler-strategy", choices=MAMBA_STRATEGIES, help="mamba cache strategy, 0.5.9–0.5.19 name"
    )
    g.add_argument("--mamba-radix-cache-strategy", choices=MAMBA_STRATEGIES, help="mamba cache strategy, ≥0.5.14 name")
    _bool_flag(g, "--disable-radix-cache", "turn the prefix (radix) cache off")
    _bool_flag(g, "--disable-overlap-schedule", "turn the overlap scheduler off")
    g.add_argument("--page-size", type=int, help="KV page size (default 1)")
    g.add_argument("--attention-backend", help="attention backend name (reported only)")
    _bool_flag(g, "--enable-cache-report", "report usage.prompt_tokens_details.cached_tokens")
    g.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (401 otherwise; /health exempt)")
    _bool_flag(g, "--enable-metrics", "serve Prometheus /metrics")
    g.add_argument("--tp-size", "--tp", type=int, help="tensor parallel size (reported only)")
    g.add_argument("--max-mamba-cache-size", type=int, help="mamba cache slots; caps hybrid-model concurrency")
    g.add_argument("--host", help="bind address (default 127.0.0.1)")
    g.add_argument("--port", type=int, help="port (default 0: pick a free one; the URL is the first stdout line)")


def _add_simulator_flags(parser: argparse.ArgumentParser) -> None:
    s = parser.add_argument_group("simulator")
    s.add_argument("--sim-version", choices=tuple(EMULATED), help="SGLang version to emulate (default 0.5.23)")
    s.add_argument("--sim-architecture", help="HF architecture to pretend (default: derived from --model-path)")
    s.add_argument("--decode-rate", type=float, help="aggregate decode tokens/s at a full batch (default 0: instant)")
    s.add_argument(
        "--prefill-rate",
        type=float,
        help="prompt tokens/s the server prefills (only what its prefix cache misses; with --decode-rate; default 0: "
        "instant)",
    )
    s.add_argument(
        "--prefix-cache-tokens",
        type=int,
        help="radix prefix cache size in tokens, least recently used out (default 1048576)",
    )
    s.add_argument("--mean-output-tokens", type=int, help="mean completion length before max_tokens (default 1500)")
    s.add_argument("--seed", type=int, help="seed for output lengths, text and faults (default 0)")
    s.add_argument("--spec-accept-length", type=float, help="mean speculative accept length")
    s.add_argument(
        "--replies",
        metavar="FILE",
        help='JSONL of scripted replies, one per line: {"prompt": ..., "reasoning": ... or null, "content": '
        '..., "finish_reason": "stop" or "length"}; a chat request whose last user message is a prompt gets '
        "exactly that reply",
    )
    s.add_argument(
        "--stream-chunk-chars",
        type=_count,
        metavar="N",
        help="stream deltas of N characters each (the last of the reasoning and of the content shorter) instead of "
        "a few tokens' worth (default 0: tokens)",
    )
    _bool_flag(s, "--old-stream-shape", "emit the 0.5.9 SSE chunk shape (usage: null on every chunk)")
    s.add_argument("--slow-start", type=float, help="seconds the port stays closed, as while loading weights")
    s.add_argument("--warmup", type=float, help="seconds /health answers 503 after the port opens")
    s.add_argument("--health-delay", type=float, help="seconds /health takes (real SGLang: ≥1)")
    s.add_argument(
        "--disconnect-check",
        type=_seconds,
        metavar="S",
        help="notice that a non-streaming request's client has gone as SGLang does: only after S seconds without "
        "output (SGLang: 4), so a running request decodes to its end unless /abort_request names it, and a queued "
        "one is dropped after S seconds (default 0: at once)",
    )


def _add_fault_flags(parser: argparse.ArgumentParser) -> None:
    f = parser.add_argument_group("faults (probabilities per generation request; deterministic under --seed)")
    for flag, _field, help_text in _FAULT_FLAGS:
        f.add_argument(flag, type=_probability, metavar="P", help=help_text)
    f.add_argument("--die-after", type=int, metavar="N", help="stop serving (exit) after N generation responses")
    f.add_argument(
        "--fail-503-after",
        type=int,
        metavar="N",
        help="after N generation responses, answer every generation request with 503 while /health stays 200",
    )
    f.add_argument(
        "--fail-503-every",
        type=_seconds,
        metavar="S",
        help="bursts of 503: in the last --fail-503-for seconds of every S-second period after the port opens, "
        "answer every generation request with 503 while /health stays 200",
    )
    f.add_argument("--fail-503-for", type=_seconds, metavar="S", help="length of each 503 burst (default 1)")
    f.add_argument(
        "--loop-share",
        type=_probability,
        metavar="P",
        help="share of thinking generations that fall into a verbatim loop part-way (one unit of 40-1,600 "
        "characters, repeated) and run to max_tokens at the decode rate; drawn from the prompt and the request's "
        "seed (not per attempt), so a retry with a new seed draws again",
    )
    f.add_argument(
        "--trickle-s",
        type=_seconds,
        metavar="S",
        help="slow but alive: streams send one delta every S seconds (the role chunk at once)",
    )
    f.add_argument(
        "--down-after",
        type=int,
        metavar="N",
        help="after N generation responses, close the port and drop connections for --down-for seconds, then "
        "serve again on the same port (once; /health then follows --warmup again)",
    )
    f.add_argument(
        "--close-connections",
        action="store_true",
        default=None,
        help="close every connection right after its response, without 'Connection: close' (a gateway that drops "
        "kept-alive connections): a client that reuses one finds it closed",
    )
    f.add_argument(
        "--down-for", type=_seconds, metavar="S", help="seconds the port stays closed after --down-after (default 5)"
    )


def _add_release_flags(parser: argparse.ArgumentParser) -> None:
    """Every other flag of any emulated release, kept as given; which release has which is checked after parsing."""
    g = parser.add_argument_group(
        "every other SGLang flag of the emulated release (--sim-version): accepted and echoed in /server_info"
    )
    for flag in all_flags().values():
        if flag.name in _MODELED:
            continue
        kwargs: dict[str, Any] = {"dest": _EXTRA + flag.name, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
        if flag.nargs == "0":
            kwargs["action"] = "store_true"
        elif flag.nargs == "b":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif flag.nargs != "1":
            kwargs["nargs"] = flag.nargs
        g.add_argument(flag.option, **kwargs)


def _coerce(raw: Any) -> Any:
    """A flag value as SGLang's argparse `type` would make it, near enough to echo: int, float, else the text."""
    if isinstance(raw, list):
        return [_coerce(x) for x in raw]
    if not isinstance(raw, str):
        return raw
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _release_args(values: dict[str, Any], version: str) -> dict[str, Any]:
    """The given flags this release does not model, checked against its flag table: server_args name → value."""
    table = flags_of(version)
    extra: dict[str, Any] = {}
    for key in [k for k in values if k.startswith(_EXTRA)]:
        name = key[len(_EXTRA) :]
        flag: Flag | None = table.get(name)
        value = values.pop(key)
        if flag is None:
            raise SimStartupError(f"unrecognized arguments: --{name}", "argparse")
        extra[flag.dest] = _coerce(value)
    return extra


_NS_TO_FIELD = {
    "sim_version": "version",
    "sim_architecture": "architecture",
    "decode_rate": "decode_tokens_per_s",
    "prefill_rate": "prefill_tokens_per_s",
    "slow_start": "slow_start_s",
    "warmup": "warmup_s",
    "health_delay": "health_delay_s",
    "disconnect_check": "disconnect_check_s",
    "down_for": "down_for_s",
    "fail_503_every": "fail_503_every_s",
    "fail_503_for": "fail_503_for_s",
    **{flag[2:].replace("-", "_"): name for flag, name, _help in _FAULT_FLAGS},
}


def _from_namespace(ns: argparse.Namespace, argv: tuple[str, ...] = ()) -> SimConfig:
    known = {f.name for f in dataclasses.fields(SimConfig)}
    raw = {_NS_TO_FIELD.get(key, key): value for key, value in vars(ns).items() if value is not None}
    version = str(raw.get("version") or SimConfig.version)
    extra = _release_args(raw, version)
    values = {name: value for name, value in raw.items() if name in known}
    config = SimConfig(**values, extra_args=extra, launch_argv=argv)
    check_flags(config.server_args(), config.version)
    check_spec_algorithm(config.speculative_algorithm, config.version)  # argparse's choices, before anything runs
    total = sum(config.probabilities())
    if total > 1 + 1e-9:
        raise SimStartupError(f"the --fail-* probabilities must sum to at most 1, got {total:g}", "argparse")
    return config


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """The SimConfig for parsed `regen sim` flags; a flag the simulated version lacks is an argparse error."""
    argv = sys.argv[2:] if sys.argv[1:2] == ["sim"] else sys.argv[1:]
    try:
        return _from_namespace(ns, tuple(argv))
    except SimStartupError as exc:
        parser = getattr(ns, "_sim_parser", None)
        if parser is None:
            raise
        parser.error(exc.message)
        raise  # unreachable: parser.error exits
