"""`regen launch`: the SGLang server a config expects, started with no shell in between, then verified.

`[launch].args` is a table of flag → value (names without dashes): a string or number becomes `--flag value`,
true a bare `--flag`, false nothing, a list `--flag v1 v2 ...`, a table its JSON. The same argv goes into a
standalone `launch.sh` (every word through `shlex.quote`, so spaces, quotes and `$` survive a copy to a remote
node), and, when launching here, straight to `posix_spawn`. Before anything starts, `static_check` flags the
combinations the target SGLang version is known to refuse or rewrite; after the server is up, preflight checks
`[expect]` plus every launched arg against what the server reports ("you passed X=a, the server runs X=b").
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import os
import re
import shlex
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ..config import Config
from ..endpoints.transport import Timeouts, Transport
from ..errors import ConfigError, EndpointDownError, EndpointError, PreflightError, RequestError
from ..sglang.releases import NEWEST
from . import launch_rules
from .preflight import preflight_endpoint

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SIM_MODULE = "pipeline.sim"
LOG_TAIL_LINES = 30


# ---------------------------------------------------------------- argv, script, expectations (pure)


def _flag_tokens(name: str, value: Any) -> list[str]:
    flag = "--" + name.lstrip("-")
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, list | tuple):
        return [flag, *(_word(v) for v in value)] if value else []
    return [flag, _word(value)]


def _word(value: Any) -> str:
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _host_port(cfg: Config) -> tuple[str, int]:
    args = cfg.launch.args
    return str(args.get("host", cfg.launch.host)), int(args.get("port", cfg.launch.port))


def launch_argv(cfg: Config) -> list[str]:
    """The exact argv: [launch].command, then one group per [launch].args flag, then --host and --port."""
    if not cfg.launch.command:
        raise ConfigError("launch.command is empty: give an argv list, e.g. ['python3', '-m', 'sglang.launch_server']")
    argv = list(cfg.launch.command)
    for name, value in cfg.launch.args.items():
        if name not in ("host", "port"):
            argv += _flag_tokens(name, value)
    host, port = _host_port(cfg)
    return [*argv, "--host", host, "--port", str(port)]


def launch_script(cfg: Config, problems: list[dict[str, Any]] | None = None) -> str:
    """A standalone bash script: env exports, then `exec` of the argv, every word quoted with shlex.quote."""
    lines = [
        "#!/usr/bin/env bash",
        "# Written by `regen launch`: the SGLang server this config expects.",
        "set -euo pipefail",
    ]
    for problem in problems or ():
        text = " ".join(f"{problem['problem']}: {problem['hint']}".split())  # one line: no newline in a comment
        lines.append(f"# {'FATAL' if problem['fatal'] else 'warning'}: {text}")
    for name, value in cfg.launch.env.items():
        if not _ENV_NAME.match(name):
            raise ConfigError(f"launch.env: {name!r} is not a valid environment variable name")
        lines.append(f"export {name}={shlex.quote(value)}")
    words = [shlex.quote(w) for w in launch_argv(cfg)]
    body = " \\\n    ".join(_groups(words))
    tail = f" \\\n    >>{shlex.quote(cfg.launch.log_file)} 2>&1" if cfg.launch.log_file else ""
    return "\n".join([*lines, f"exec {body}{tail}", ""])


def _groups(words: list[str]) -> list[str]:
    """Words joined so each flag starts a continuation line (readable, still one command)."""
    groups: list[list[str]] = [[]]
    for word in words:
        if word.startswith("--") and groups[-1]:
            groups.append([])
        groups[-1].append(word)
    return [" ".join(g) for g in groups]


def launch_expectations(cfg: Config) -> dict[str, Any]:
    """Every launched arg as an expectation on its server_args key (host and port included)."""
    host, port = _host_port(cfg)
    out = {name: value for name, value in cfg.launch.args.items() if value is not None}
    out.update(host=host, port=port)
    return out


def target_version(cfg: Config) -> str | None:
    """The SGLang version to check flags against: launch.sglang_version, the simulator's --sim-version, or the
    installed sglang package."""
    if cfg.launch.sglang_version:
        return cfg.launch.sglang_version
    if _SIM_MODULE in cfg.launch.command:
        return str(cfg.launch.args.get("sim-version", NEWEST))
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def static_check(cfg: Config, version: str | None) -> list[dict[str, Any]]:
    """Known-bad combinations in [launch] for SGLang `version`, before anything starts: {key, problem, hint, fatal}."""
    _, port = _host_port(cfg)
    concurrency = next((spec.concurrency for spec in cfg.endpoints if spec.url.rstrip("/").endswith(f":{port}")), None)
    unknown = [] if _SIM_MODULE in cfg.launch.command else _unknown_flags(cfg.launch.args, version)
    return unknown + launch_rules.known_bad(cfg.launch.args, cfg.launch.env, version, cfg.expect, concurrency)


def _unknown_flags(args: Mapping[str, Any], version: str | None) -> list[dict[str, Any]]:
    """Flags SGLang `version`'s argparse does not have (it exits 2 on them), from the release's flag table."""
    from ..sglang.flags import flags_of  # a 280-line table, read only when a launch is checked

    try:
        table = flags_of(str(version))
    except KeyError:
        return []  # a release without a table: nothing to check against
    return [
        {
            "key": name,
            "problem": f"SGLang {version} has no --{name} (argparse: unrecognized arguments, exit 2)",
            "hint": "remove it or use this release's spelling",
            "fatal": True,
        }
        for name in args
        if name not in table
        and name not in ("host", "port")
        and "_" not in name  # known_bad names these (and the mamba flags) with a better hint
        and name not in ("mamba-scheduler-strategy", "mamba-radix-cache-strategy")
        and not _abbreviates(name, table)
    ]


def _abbreviates(name: str, table: Mapping[str, Any]) -> bool:
    """argparse takes an unambiguous prefix of a long flag (`--tp` for `--tp-size`)."""
    return len([flag for flag in table if flag.startswith(name)]) == 1


def expected_capacity(cfg: Config, version: str | None) -> dict[str, Any] | None:
    """{requests, limit, flag, cause} for the command `regen launch` writes (requests None: set by GPU memory)."""
    cap = launch_rules.expected_capacity(cfg.launch.args, cfg.launch.env, version)
    return None if cap is None else dataclasses.asdict(cap)


def format_static(problems: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"  {'FATAL' if p['fatal'] else 'warning'} {p['key']}: {p['problem']} ({p['hint']})" for p in problems
    )


# ---------------------------------------------------------------- starting and waiting


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host not in ("0.0.0.0", "") else "127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def _spawn(argv: list[str], env: Mapping[str, str], log_path: Path) -> int:
    """Start argv in its own session, stdout+stderr appended to the log; no shell. Returns the pid.

    posix_spawn rather than subprocess.Popen: the server outlives this call (and `regen launch` itself), and a
    Popen object dropped while its child runs warns; the pid is all a caller keeps."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, fd, 1),
            (os.POSIX_SPAWN_DUP2, fd, 2),
        ]
        return os.posix_spawnp(argv[0], argv, dict(env), file_actions=actions, setsid=True)
    except OSError as exc:
        raise ConfigError(f"launch.command: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def exit_status(pid: int) -> int | None:
    """The exit code of our child `pid` (reaping it), or None while it runs; -N means killed by signal N."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def stop(pid: int, timeout_s: float = 10.0) -> int | None:
    """SIGTERM the server's process group (it runs in its own session), SIGKILL after `timeout_s`; reap it."""
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return exit_status(pid)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            code = exit_status(pid)
            if code is not None:
                return code
            time.sleep(0.05)
    return exit_status(pid)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


async def wait_ready(
    pid: int, url: str, timeout_s: float, log_path: Path, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> float:
    """Poll /health until 200, tolerating the closed port while weights load and 503 while warming up.
    Raises EndpointError at once if the process exits, or after `timeout_s` (the process is then stopped)."""
    started = time.monotonic()
    state = "not started"
    timeouts = Timeouts(connect=2.0, total=30.0)
    async with Transport(url, headers={}, connect_timeout_s=2.0, limit=2) as http:
        while True:
            code = exit_status(pid)
            if code is not None:
                tail = log_tail(log_path)
                last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
                raise EndpointError(
                    f"the server exited ({_describe_exit(code)}) before it was ready: {last.strip()}\n"
                    f"last lines of {log_path}:\n{tail}"
                )
            try:
                resp = await http.request("GET", "/health", timeouts=timeouts)
                if resp.status == 200:
                    return time.monotonic() - started
                state = f"/health {resp.status} (warming up)"
            except EndpointDownError:
                state = "port closed (loading)"
            except RequestError as exc:
                state = str(exc)
            if time.monotonic() - started > timeout_s:
                stop(pid)
                raise EndpointError(
                    f"the server was not ready after {timeout_s:.0f}s ({state}); stopped it. Last lines of "
                    f"{log_path}:\n{log_tail(log_path)}"
                )
            await sleep(0.2)


def _describe_exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


# ---------------------------------------------------------------- the whole launch


async def launch(
    cfg: Config, *, dry_run: bool = False, script: Path | None = None, check: bool = True
) -> dict[str, Any]:
    """Write the launch script, then (unless `dry_run`) start the server, wait until healthy and preflight it.

    `script` defaults to ./launch.sh; a dry run writes nothing unless `script` is given (the text is in
    `script_text` either way), so trying a config never overwrites a script.

    Returns {ok, argv, pid, url, version, script, log_file, static, capacity, preflight}; `capacity` is the
    expected effective max_running_requests of the command ({requests, limit, flag, cause}). A fatal static problem
    raises PreflightError before anything starts (`check=False` starts anyway); a server that exits or never becomes
    healthy raises EndpointError with the tail of its log. A server that runs is left running (its pid is returned)
    even when preflight finds drift, so its log and /server_info can be read.
    """
    version = target_version(cfg)
    problems = static_check(cfg, version)
    fatal = [p for p in problems if p["fatal"]]
    host, port = _host_port(cfg)
    if not dry_run and port == 0:
        port = _free_port(host)
        args = {k: v for k, v in cfg.launch.args.items() if k != "port"}
        cfg = dataclasses.replace(cfg, launch=dataclasses.replace(cfg.launch, port=port, args=args))
    argv = launch_argv(cfg)
    text = launch_script(cfg, problems)
    if script is None and not dry_run:
        script = Path("launch.sh")
    if script is not None:
        await asyncio.to_thread(_write_script, script, text)
    url = f"http://{_connect_host(host)}:{port}"
    result: dict[str, Any] = {
        "ok": not fatal,
        "argv": argv,
        "pid": None,
        "url": url,
        "version": version,
        "script": str(script) if script is not None else None,
        "script_text": text,
        "log_file": None,
        "static": problems,
        "capacity": expected_capacity(cfg, version),
        "preflight": None,
    }
    if dry_run:
        return result
    if fatal and check:
        raise PreflightError(
            f"SGLang {version or '(unknown version)'} would refuse this launch:\n{format_static(fatal)}"
        )
    assert script is not None  # not a dry run: written above
    log_path = Path(cfg.launch.log_file) if cfg.launch.log_file else script.with_suffix(".log")
    pid = _spawn(argv, {**os.environ, **cfg.launch.env}, log_path)
    result.update(pid=pid, log_file=str(log_path))
    result["ready_s"] = round(await wait_ready(pid, url, cfg.launch.ready_timeout_s, log_path), 3)
    api_key = cfg.launch.args.get("api-key") or cfg.launch.args.get("api_key")
    report = await preflight_endpoint(url, _local(cfg, url), api_key=api_key, extra_expect=launch_expectations(cfg))
    result["preflight"] = {"ok": report["ok"], "endpoints": [report]}
    result["ok"] = report["ok"] and not fatal
    return result


def _local(cfg: Config, url: str) -> Config:
    """The config as seen by the launched endpoint: the matching endpoint's concurrency, or the first's."""
    port = url.rsplit(":", 1)[-1]
    ep = next((e for e in cfg.endpoints if e.url.rstrip("/").endswith(f":{port}")), None)
    if ep is None:
        ep = dataclasses.replace(cfg.endpoints[0], url=url) if cfg.endpoints else None
    return dataclasses.replace(cfg, endpoints=(dataclasses.replace(ep, url=url),)) if ep else cfg


def _write_script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    tmp.replace(path)


def format_launch(result: Mapping[str, Any]) -> str:
    """What `regen launch` prints: the argv, the script, static problems, then the preflight table."""
    from .preflight import format_preflight

    lines = [f"argv: {shlex.join(result['argv'])}"]
    if result["script"] is not None:
        lines.append(f"script: {result['script']}")
    else:
        lines += ["script (not written by a dry run; --script FILE writes it):", result["script_text"].rstrip("\n")]
    cap = result.get("capacity")
    if cap is not None:
        runs = f"at most {cap['requests']} requests at once" if cap["requests"] else "a capacity set by GPU memory"
        lines.append(f"expected capacity (SGLang {result['version']}): {runs}: {cap['cause']}")
    if result.get("static"):
        lines += ["static check:", format_static(result["static"])]
    if result.get("pid"):
        lines.append(f"server pid {result['pid']} at {result['url']} (log: {result['log_file']})")
    if result.get("preflight"):
        lines += ["", format_preflight(result["preflight"])]
    return "\n".join(lines)
