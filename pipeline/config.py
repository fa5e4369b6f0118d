"""The run configuration: frozen dataclasses loaded strictly from TOML.

Every key is known: a misspelled key is an error naming its path and the closest valid key, a wrong type names
the key, what was expected and what was given. `--set a.b=VALUE` overrides use TOML value syntax. The hash of the
generation-relevant part decides whether a resume may continue a run.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import logging
import math
import os
import tomllib
import types
import typing
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .errors import ConfigError


@dataclass(frozen=True)
class InputConfig:
    path: str = "data/sample_prompts.jsonl"
    format: str = "auto"  # auto | jsonl | parquet | datasets | openai-batch
    id_field: str = "id"
    messages_field: str = "auto"  # "auto": `messages` or `conversations`, per row; or name the field
    prompt_field: str = "prompt"
    system_prompt: str = ""
    keep_fields: tuple[str, ...] = ()
    dedupe: bool = False
    request_overrides: bool = False  # openai-batch: let each request body's sampling fields override [generation]
    batch_rows: int = 1024
    select: str = "all"  # "invalid": only rows whose stored assistant turns fail the validators (regen audit)
    repair: str = "conversation"  # "from_first_bad_turn": keep a row's turns before its first failing one as given
    max_bad_share: float = 0.5  # more of the first 1,000 rows than this refused (bad_input): stop, exit 2; 1 = never


@dataclass(frozen=True)
class OutputConfig:
    dir: str = "runs/demo"
    shard_rows: int = 10000
    row_group_rows: int = 512
    sync_interval_s: float = 1.0
    progress_interval_s: float = 60.0  # a progress line on the log this often (regen run)
    metrics_port: int = 0  # serve Prometheus metrics on this port while the run lives; 0 = off
    metrics_host: str = "127.0.0.1"  # the address the metrics server binds (0.0.0.0 for a cluster scraper)
    metrics_linger_s: float = 0.0  # keep serving this long after the run ends, so a last scrape sees the end
    # Runs in a bucket (dir = "s3://bucket/run"; docs/storage.md): the node-local working copy and journal live
    # under journal_dir (default ~/.cache/regen/runs, keyed by the run URI); parts are committed to the bucket at
    # least every remote_sync_s (what a lost node costs at most); a worker's lease expires lease_s after its renewal.
    journal_dir: str = ""
    remote_sync_s: float = 60.0
    lease_s: float = 60.0


@dataclass(frozen=True)
class GenerationConfig:
    model: str = "default"
    thinking: bool = True
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0
    max_tokens: int = 32768
    seed: int = 0
    separate_reasoning: bool = True
    turns: str = "all"  # "all": regenerate every assistant turn in order; "last": only the one after the last user turn
    history_reasoning: bool = False  # send earlier turns' reasoning back as reasoning_content
    samples: int = 1  # regenerations per input row; > 1 gives ids "<id>#<k>" and a source_id column
    temperatures: tuple[float, ...] = ()  # one temperature per sample (length = samples), or empty


@dataclass(frozen=True)
class ClientConfig:
    max_attempts: int = 4
    max_endpoint_failures: int = 8  # requests of a prompt lost to endpoints (down, hung, refusing for load)
    request_timeout_s: float = 3600.0
    connect_timeout_s: float = 10.0
    stream: bool = True  # needed by loop_guard; false: one JSON body per completion (the guard cannot run)
    loop_guard: bool = True  # stop a streaming generation once it loops (abort on the server, resample)
    # an input with tools and a server that reports no tool-call parser: the run refuses to start (exit 3) unless
    # true (every turn that calls a tool is then rejected `tool_call`, its markup never stored as an answer)
    allow_no_tool_parser: bool = False
    stall_timeout_s: float = 120.0
    hang_floor_s: float = 600.0  # a request is hung (aborted, retried elsewhere) after max(hang_floor_s,
    hang_slack: float = 3.0  # hang_slack * max_tokens / the endpoint's slow decode rate); see engine/deadline.py
    failure_window: int = 100  # the run stops (exit 3) when max_failure_share of the last failure_window requests
    max_failure_share: float = 0.9  # failed for reasons that are not the prompts' (engine/circuit.py)
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    drain_timeout_s: float = 30.0
    health_interval_s: float = 10.0  # /health probe of every live endpoint (catches hung servers)
    health_timeout_s: float = 20.0  # SGLang's /health runs a 1-token generation: give it time under load
    health_failures: int = 3  # consecutive failed probes before an endpoint is declared down
    recheck_interval_s: float = 60.0  # re-read each endpoint's /server_info: a restart with other args retires it
    no_endpoint_timeout_s: float = 600.0  # stop (exit 3) when no endpoint has been usable this long
    queue_size: int = 0  # prompts buffered between reader and dispatcher; 0 = the total concurrency, at least 64
    sticky_conversations: bool = True  # a conversation's turns go to the endpoint of its previous turn (prefix cache)
    sticky_wait_s: float = 5.0  # how long a turn waits for a slot there before taking the least-loaded endpoint
    server_view_interval_s: float = 10.0  # read each server's own figures (/metrics, /v1/loads); 0 = off


SIM_URL = "sim"  # an endpoint url that asks for the embedded simulator (check_url), served for the length of a run


@dataclass(frozen=True)
class EndpointConfig:
    url: str = "http://127.0.0.1:30000"
    concurrency: int = 64  # 0 = from the server's advertised capacity (effective max running requests)
    api_key_env: str = ""
    requests_per_second: float = 0.0
    sim_args: tuple[str, ...] = ()  # for url = "sim": `regen sim` flags of the embedded simulator


_log = logging.getLogger("regen.config")

LOOPING_RULES = ("unfinished", "any", "off")


@dataclass(frozen=True)
class ValidateConfig:
    require_answer: bool = True
    require_reasoning: bool = True
    reject_truncated: bool = True
    reject_answer_in_reasoning: bool = True
    reject_think_markers: bool = True  # `<think>`/`</think>` left in the answer or reasoning after the split
    min_answer_chars: int = 1
    max_repetition: float = 0.0  # 0 = off; else reject when one n-gram covers this fraction of the text
    # `looping` (pipeline/loops.py): "unfinished" rejects a generation that did not end (the guard stopped it, or
    # it ran to the limit in a loop) and keeps repetition the model ended itself, measured in `repetition_chars`;
    # "any" rejects every completion with a loop by the text's rule (but repetition copied from the prompt);
    # "off" only the guard's stops (a generation stopped is never accepted)
    reject_looping: str = "unfinished"


@dataclass(frozen=True)
class ExportConfig:
    """What only the publisher knows, for the dataset card of `regen export` (flags override it)."""

    license: str = ""  # a Hugging Face Hub license id, e.g. "apache-2.0"; empty = "unknown" on the card
    language: tuple[str, ...] = ()  # ISO 639-1 codes


@dataclass(frozen=True)
class LaunchConfig:
    command: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 30000
    log_file: str = ""
    sglang_version: str = ""
    ready_timeout_s: float = 1800.0


@dataclass(frozen=True)
class Config:
    input: InputConfig = field(default_factory=InputConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    endpoints: tuple[EndpointConfig, ...] = ()  # none is an error only where requests go out (check_endpoints)
    endpoints_file: str = ""  # re-read while running: one URL per line (optionally "URL concurrency"), or TOML
    expect: dict[str, Any] = field(default_factory=dict)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    export: ExportConfig = field(default_factory=ExportConfig)

    def generation_fingerprint(self) -> dict[str, Any]:
        """What must not change between a run and its resume: the model, sampling and the validators."""
        # As plain JSON data (tuples as lists), so it compares equal to the copy read back from run.json.
        result: dict[str, Any] = _plain(
            {"generation": dataclasses.asdict(self.generation), "validate": dataclasses.asdict(self.validate)}
        )
        return result

    def generation_hash(self) -> str:
        blob = orjson.dumps(self.generation_fingerprint(), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain data. Secrets are never in a Config (only env var names)."""
        result: dict[str, Any] = _plain(dataclasses.asdict(self))
        return result


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------- loading


def read_endpoints_file(path: str | Path, default_concurrency: int = 64) -> tuple[EndpointConfig, ...]:
    """Endpoints from a file: TOML with [[endpoints]] tables, or one `URL [concurrency]` per line (# comments)."""
    text = Path(path).read_text(encoding="utf-8")
    if "[[endpoints]]" in text:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
        extra = set(data) - {"endpoints"}
        if extra:
            raise ConfigError(f"{path}: unknown key {sorted(extra)[0]!r}; an endpoints file holds [[endpoints]] only")
        built = _coerce(tuple[EndpointConfig, ...], data["endpoints"], path="endpoints", where=str(path))
        for i, spec in enumerate(built):
            check_url(spec.url, f"{path}: endpoints[{i}].url")
        return typing.cast(tuple[EndpointConfig, ...], built)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) > 2 or (len(fields) == 2 and not fields[1].isdigit()):
            raise ConfigError(f"{path}:{n}: expected 'URL [concurrency]', got {line.strip()!r}")
        check_url(fields[0], f"{path}:{n}")
        conc = int(fields[1]) if len(fields) == 2 else default_concurrency
        out.append(EndpointConfig(url=fields[0], concurrency=conc))
    return tuple(out)


def load_config(
    path: str | Path | None, overrides: typing.Sequence[str] = (), *, required: typing.Sequence[str] = ()
) -> Config:
    """Read a TOML file (or start from defaults when `path` is None) and apply `--set` overrides.

    A config file with no key at all is refused (an empty file would run on every default, a relative sample path
    among them). `required` names dotted keys that the file or an override must set, for a command whose default
    would silently stand in for them (`regen run`'s input.path)."""
    data: dict[str, Any] = {}
    where = "<defaults>"
    if path is not None:
        where = str(path)
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{where}: config file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read config: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: invalid TOML: {exc}") from None
        if not data:
            raise ConfigError(
                f"{where}: the config file sets nothing; `regen init DATASET --endpoint URL` writes one that runs "
                "as written (or start from configs/qwen36-27b-mtp.toml)"
            )
    for item in overrides:
        apply_override(data, item)
    cfg = config_from_dict(data, where=where)  # unknown and misspelled keys first: the likelier mistake
    for key in required:
        if not _is_set(data, key):
            section, _, name = key.partition(".")
            raise ConfigError(f"{where}: {key} is not set; add `{name} = ...` under [{section}] or give it with --set")
    return cfg


def _is_set(data: dict[str, Any], dotted: str) -> bool:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def config_from_dict(data: dict[str, Any], where: str = "<config>") -> Config:
    cfg = typing.cast(Config, _build(Config, data, path="", where=where))
    _check_values(cfg, where)
    return cfg


_RESERVED_COLUMNS = {
    "id", "messages", "reasoning", "answer", "finish_reason", "prompt_tokens", "completion_tokens",
    "reasoning_tokens", "model", "endpoint", "attempts", "latency_s", "seed", "created_at",
    "spec_accept_length", "spec_verify_ct", "repetition_chars", "reason", "detail", "turns", "source_id",
}  # fmt: skip


def _at_least(n: float) -> typing.Callable[[Any], bool]:
    return lambda v: v >= n


def _positive(v: Any) -> bool:
    return bool(v > 0)


# Every numeric key with its allowed range (a failing check names the key, the range and the value). The sampling
# ranges are SGLang's own, so a value it would answer with 400 for every prompt stops the run before it starts.
_RANGES: tuple[tuple[str, typing.Callable[[Any], bool], str], ...] = (
    ("input.batch_rows", _at_least(1), "at least 1"),
    ("input.max_bad_share", lambda v: 0 <= v <= 1, "in [0, 1] (1 = never stop)"),
    ("input.select", lambda v: v in ("all", "invalid"), "'all' or 'invalid'"),
    ("input.repair", lambda v: v in ("conversation", "from_first_bad_turn"), "'conversation' or 'from_first_bad_turn'"),
    ("output.shard_rows", _at_least(1), "at least 1"),
    ("output.row_group_rows", _at_least(1), "at least 1"),
    ("output.sync_interval_s", _positive, "positive"),
    ("output.remote_sync_s", _positive, "positive"),
    ("output.lease_s", _at_least(5), "at least 5"),
    ("output.progress_interval_s", _positive, "positive"),
    ("output.metrics_port", lambda v: 0 <= v <= 65535, "0 (off) or a port number in [1, 65535]"),
    ("output.metrics_linger_s", _at_least(0), "0 or more"),
    ("generation.temperature", _at_least(0), "0 or more"),
    ("generation.top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("generation.top_k", lambda v: v == -1 or v >= 1, "-1 (off) or at least 1"),
    ("generation.min_p", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("generation.max_tokens", _at_least(1), "at least 1"),
    ("generation.turns", lambda v: v in ("all", "last"), "'all' or 'last'"),
    ("generation.samples", _at_least(1), "at least 1"),
    ("client.max_attempts", _at_least(1), "at least 1"),
    ("client.max_endpoint_failures", _at_least(1), "at least 1"),
    ("client.request_timeout_s", _positive, "positive"),
    ("client.connect_timeout_s", _positive, "positive"),
    ("client.stall_timeout_s", _positive, "positive"),
    ("client.hang_floor_s", _positive, "positive"),
    ("client.hang_slack", _at_least(1), "at least 1"),
    ("client.failure_window", _at_least(1), "at least 1"),
    ("client.max_failure_share", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("client.backoff_base_s", _at_least(0), "0 or more"),
    ("client.backoff_max_s", _at_least(0), "0 or more"),
    ("client.drain_timeout_s", _at_least(0), "0 or more"),
    ("client.health_interval_s", _positive, "positive"),
    ("client.health_timeout_s", _positive, "positive"),
    ("client.health_failures", _at_least(1), "at least 1"),
    ("client.recheck_interval_s", _positive, "positive"),
    ("client.no_endpoint_timeout_s", _positive, "positive"),
    ("client.queue_size", _at_least(0), "0 (automatic) or more"),
    ("client.sticky_wait_s", _at_least(0), "0 or more"),
    ("client.server_view_interval_s", _at_least(0), "0 (off) or more"),
    ("validate.min_answer_chars", _at_least(0), "0 or more"),
    ("validate.max_repetition", lambda v: 0 <= v <= 1, "in [0, 1] (0 = off)"),
    (
        "validate.reject_looping",
        lambda v: v in LOOPING_RULES,
        "'unfinished' (the default: a generation that did not end), 'any' or 'off' (true was 'any', false 'off')",
    ),
    ("launch.port", lambda v: 0 <= v <= 65535, "0 (a free port) or a port number in [1, 65535]"),
    ("launch.ready_timeout_s", _positive, "positive"),
)


def _check_values(cfg: Config, where: str) -> None:
    for key, ok, allowed in _RANGES:
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if not ok(value):
            raise ConfigError(f"{where}: {key} must be {allowed}, got {value!r}")
    for i, spec in enumerate(cfg.endpoints):
        check_url(spec.url, f"{where}: endpoints[{i}].url")
        if spec.concurrency < 0:
            raise ConfigError(f"{where}: endpoints[{i}].concurrency must be 0 (automatic) or more")
        if spec.requests_per_second < 0:
            raise ConfigError(f"{where}: endpoints[{i}].requests_per_second must be 0 (unlimited) or more")
    temps = cfg.generation.temperatures
    if temps and (len(temps) != cfg.generation.samples or min(temps) < 0):
        raise ConfigError(
            f"{where}: generation.temperatures must hold generation.samples ({cfg.generation.samples}) values, "
            f"each 0 or more, got {list(temps)!r}"
        )
    clash = sorted(set(cfg.input.keep_fields) & _RESERVED_COLUMNS)
    if clash:
        raise ConfigError(f"{where}: input.keep_fields {clash[0]!r} is an output column name; rename it in the data")


def check_endpoints(cfg: Config, where: str = "<config>") -> None:
    """A run or preflight has somewhere to send requests: `[[endpoints]]`, `endpoints_file` or `--endpoint URL`.

    Not part of loading: `regen launch`, `audit --config` and `validate` send no generation request, and a config
    without endpoints is a fine thing to hand them. The simulator is never a default; `url = "sim"` asks for it."""
    if not cfg.endpoints and not cfg.endpoints_file:
        raise ConfigError(
            f'{where}: no [[endpoints]]: add one with the server\'s url (url = "http://host:30000"), or url = "sim" '
            "for the embedded simulator (or give --endpoint URL)"
        )


def check_url(url: str, where: str) -> None:
    """An endpoint URL is `sim` or an absolute http(s) URL with a host and nothing a request would drop: a query
    string, a fragment or `user:password@` (a key goes in `api_key_env`). Fails at load, not at run; the message never
    repeats a password."""
    if url == "sim":
        return
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check ('host:3000O' raises)
    except ValueError as exc:
        raise ConfigError(f"{where}: {_redacted(url)!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        example = "" if "://" in url else f" (did you mean 'http://{url}'?)"
        raise ConfigError(f"{where}: {url!r} is not 'sim' or an http:// or https:// URL with a host{example}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{where}: {_redacted(url)!r} carries credentials (user:password@); put the key in an environment "
            "variable and name it in api_key_env"
        )
    if parts.query or parts.fragment:
        raise ConfigError(
            f"{where}: {url!r} has a query string or fragment, which requests would not carry; give the server's "
            "base URL (e.g. http://host:30000)"
        )
    if parts.path.rstrip("/").endswith("/v1"):
        root = url.rstrip("/")[: -len("/v1")]
        raise ConfigError(
            f"{where}: {url!r} ends in /v1 (an OpenAI base_url): give the server root, without /v1 ({root!r}); "
            "regen adds /v1/chat/completions, /health and the server's own routes itself"
        )


def _redacted(url: str) -> str:
    """`url` with anything between `://` and `@` hidden."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


def check_api_keys(cfg: Config, where: str = "<config>", environ: typing.Mapping[str, str] = os.environ) -> None:
    """Every `api_key_env` names a set, non-empty variable holding a usable key (`api_key_for`): a run or
    preflight must not go out without its key.

    Not part of loading: `regen launch` and readers of a RUN_DIR load configs whose keys live on another machine.
    """
    for i, spec in enumerate(cfg.endpoints):
        api_key_for(spec.api_key_env, f"{where}: endpoints[{i}].api_key_env", environ)


def api_key_for(env_name: str, where: str, environ: typing.Mapping[str, str] = os.environ) -> str | None:
    """The bearer token held by the variable `env_name` (None when it is ""), surrounding whitespace stripped (a
    Kubernetes secret made with `echo key | base64` ends in a newline). A control character inside the key (CR, LF,
    NUL: it would split or end the header) is a ConfigError naming the variable; the key is never printed."""
    if not env_name:
        return None
    raw = environ.get(env_name)
    key = (raw or "").strip()
    if not key:
        state = "is empty" if raw is not None else "is not set"
        raise ConfigError(
            f'{where} names ${env_name}, which {state}; export it with the key, or set api_key_env = "" for a '
            "server without a key"
        )
    bad = next((c for c in key if (ord(c) < 32 and c != "\t") or ord(c) == 127), None)
    if bad is not None:
        raise ConfigError(
            f"{where}: ${env_name} holds a control character ({bad!r}, at {key.index(bad)} of {len(key)}) inside "
            "the key; an HTTP header cannot carry it. Re-create the variable from the bare key"
        )
    return key


def with_endpoints(cfg: Config, urls: typing.Sequence[str]) -> Config:
    """`--endpoint URL...`: the config with these endpoints instead of its own. A URL the config lists keeps that
    endpoint's settings (concurrency, api_key_env, requests_per_second, sim_args); one URL given for a config of one
    endpoint replaces it and keeps its settings; any other gets the defaults, and the settings dropped are logged."""
    if not urls:
        return cfg
    for url in urls:
        check_url(url, "--endpoint")
    known = {ep.url.rstrip("/"): ep for ep in cfg.endpoints}
    single = cfg.endpoints[0] if len(cfg.endpoints) == 1 and len(urls) == 1 and cfg.endpoints[0].url != "sim" else None
    chosen = []
    for url in urls:
        base = known.get(url.rstrip("/")) or single
        chosen.append(dataclasses.replace(base, url=url, sim_args=base.sim_args if url == "sim" else ()) if base
                      else EndpointConfig(url=url))  # fmt: skip
    dropped = [
        ep for ep in cfg.endpoints if ep.url.rstrip("/") not in {u.rstrip("/") for u in urls} and ep is not single
    ]
    changed = [ep for ep in dropped if _settings(ep) != _settings(EndpointConfig())]
    if changed:
        _log.warning(
            "--endpoint replaces the config's endpoints; the settings of %s are not used: the new URLs run with %s",
            ", ".join(f"{ep.url} ({_settings(ep)})" for ep in changed),
            _settings(EndpointConfig()),
        )
    return dataclasses.replace(cfg, endpoints=tuple(chosen), endpoints_file="")


def _settings(ep: EndpointConfig) -> str:
    return (
        f"concurrency {ep.concurrency}, api_key_env {ep.api_key_env or '(none)'}, "
        f"requests_per_second {ep.requests_per_second:g}"
    )


def apply_override(data: dict[str, Any], item: str) -> None:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. generation.max_tokens=4096")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word is taken as a string: --set output.dir=runs/x
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        if part == "endpoints":
            raise ConfigError(f"--set {key}: endpoints are set with --endpoint URL")
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {part} is not a table")
    node[parts[-1]] = value


def _build(cls: type, data: Any, *, path: str, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {path or 'config'} must be a table, got {_tname(data)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        keypath = f"{path}.{key}" if path else key
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"; did you mean {_join(path, close[0])!r}?" if close else f"; valid keys: {', '.join(names)}"
            raise ConfigError(f"{where}: unknown key {keypath!r}{hint}")
        kwargs[key] = _coerce(hints[key], value, path=keypath, where=where)
    return cls(**kwargs)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _coerce(tp: Any, value: Any, *, path: str, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(typing.cast(type, tp), value, path=path, where=where)
    if origin is tuple:
        (item_tp, _) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: {path} must be an array, got {_tname(value)}")
        if dataclasses.is_dataclass(item_tp):
            item_cls = typing.cast(type, item_tp)
            return tuple(_build(item_cls, v, path=f"{path}[{i}]", where=where) for i, v in enumerate(value))
        return tuple(_coerce(item_tp, v, path=f"{path}[{i}]", where=where) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {path} must be a table, got {_tname(value)}")
        _, val_tp = typing.get_args(tp)
        if val_tp is str:
            bad = [k for k, v in value.items() if not isinstance(v, str)]
            if bad:
                raise ConfigError(f"{where}: {path}.{bad[0]} must be a string")
        return dict(value)
    if origin in (types.UnionType, typing.Union):
        return value
    return _scalar(tp, value, path=path, where=where)


# keys that were booleans once: what each value is called now
_ONCE_BOOL = {
    "validate.reject_looping": "'unfinished' (the default), 'any' or 'off' (it was a boolean: true is now 'any', "
    "false 'off')"
}


def _scalar(tp: Any, value: Any, *, path: str, where: str) -> Any:
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {path} must be a finite number, got {value!r}")
    if tp is Any:
        return value
    if tp in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{where}: {path} must be {tp.__name__}, got bool {value!r}")
    if tp is str and isinstance(value, bool) and path in _ONCE_BOOL:
        raise ConfigError(f"{where}: {path} must be {_ONCE_BOOL[path]}, got {str(value).lower()}")
    if not isinstance(value, tp):
        raise ConfigError(f"{where}: {path} must be {tp.__name__}, got {_tname(value)} {value!r}")
    return value


def _tname(value: Any) -> str:
    if isinstance(value, dict):
        return "table"
    return "array" if isinstance(value, list) else type(value).__name__
