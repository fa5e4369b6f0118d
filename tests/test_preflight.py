"""preflight.py against the in-process simulator over real HTTP, and the version-aware facts it relies on."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from pipeline import preflight  # the facade: it serves `url = "sim"` with the embedded simulator
from pipeline.cli import main
from pipeline.config import config_from_dict
from pipeline.server import server_args
from pipeline.server.checks import Check, EndpointReport, worker_checks
from pipeline.server.preflight import (
    PROBE_PROMPT,
    PROBE_RID_PREFIX,
    fingerprint_changes,
    format_preflight,
    preflight_endpoint,
    server_fingerprint,
)
from pipeline.sim import SimConfig, prompt_key, serve
from pipeline.sim.faults import FaultPlan

MODEL = "Qwen3.6-27B"
GOOD = ["--served-model-name", MODEL, "--reasoning-parser", "qwen3", "--speculative-algorithm", "EAGLE",
        "--mamba-radix-cache-strategy", "extra_buffer"]  # fmt: skip
SEED_EXPECT = {
    "speculative_algorithm": "EAGLE",
    "mamba_scheduler_strategy": "extra_buffer",
    "reasoning_parser": "qwen3",
}


def _cfg(expect: dict[str, Any] | None = None, **extra: Any) -> Any:
    return config_from_dict({"generation": {"model": MODEL}, "client": {"backoff_base_s": 0.01},
                             "expect": SEED_EXPECT if expect is None else expect, **extra})  # fmt: skip


def _with_sim(argv: list[str], body: Callable[[str], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with serve(SimConfig.from_argv(argv)) as url:
            return await body(url)

    return asyncio.run(main())


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def test_correct_configuration_passes() -> None:
    report = _with_sim(GOOD, lambda url: preflight_endpoint(url, _cfg()))
    assert report["ok"], format_preflight({"ok": False, "endpoints": [report]})
    checks = _by_name(report)
    # an expectation on the old name is checked against the key 0.5.23 reports, and says so
    assert checks["mamba_scheduler_strategy"]["key"] == "mamba_radix_cache_strategy"
    assert checks["mamba_scheduler_strategy"]["actual"] == "extra_buffer"
    assert checks["thinking"]["ok"] and checks["thinking"]["expected"] == "separated"
    assert report["info"]["speculative_decoding"] is True
    assert report["info"]["spec_accept_length"] > 1
    assert report["version"] == "0.5.23"


def test_seed_story_auto_on_0512_is_caught() -> None:
    argv = ["--sim-version", "0.5.12", "--served-model-name", MODEL, "--reasoning-parser", "qwen3",
            "--mamba-scheduler-strategy", "auto"]  # fmt: skip
    report = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg({"mamba_scheduler_strategy": "extra_buffer"})))
    assert not report["ok"]
    check = _by_name(report)["mamba_scheduler_strategy"]
    assert (check["key"], check["expected"], check["actual"], check["ok"]) == (
        "mamba_scheduler_strategy", "extra_buffer", "no_buffer", False,
    )  # fmt: skip
    assert "resolves auto (the default) to no_buffer" in check["hint"]
    assert "--mamba-scheduler-strategy extra_buffer" in check["hint"]
    table = format_preflight({"ok": False, "endpoints": [report]})
    assert "DRIFT" in table and "FAILED" in table


def test_new_name_expectation_on_old_server_checks_old_key() -> None:
    argv = ["--sim-version", "0.5.9", "--served-model-name", MODEL, "--mamba-scheduler-strategy", "extra_buffer"]
    report = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg({"mamba_radix_cache_strategy": "extra_buffer"})))
    check = _by_name(report)["mamba_radix_cache_strategy"]
    assert check["key"] == "mamba_scheduler_strategy" and check["ok"]


def test_inert_extra_buffer_with_radix_cache_off_is_drift() -> None:
    argv = ["--served-model-name", MODEL, "--mamba-radix-cache-strategy", "extra_buffer", "--disable-radix-cache"]
    report = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg({"mamba_radix_cache_strategy": "extra_buffer"})))
    check = _by_name(report)["mamba_radix_cache_strategy"]
    assert not check["ok"] and "inert" in check["actual"] and "inert" in check["hint"]


def test_only_expectations_are_drift() -> None:
    argv = ["--served-model-name", MODEL]  # no parser, no spec: information unless [expect] asks
    report = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg({})))
    checks = _by_name(report)
    assert report["ok"]
    assert checks["thinking"]["level"] == "warning" and "reasoning" in checks["thinking"]["actual"]
    assert checks["speculative"]["actual"] == "off"
    strict = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg({"reasoning_parser": "qwen3"})))
    assert not strict["ok"]
    assert not _by_name(strict)["thinking"]["ok"]
    assert "without --reasoning-parser" in _by_name(strict)["reasoning_parser"]["hint"]


def test_derived_expectations_and_unknown_keys() -> None:
    expect = {"speculative_decoding": True, "effective_max_running_requests": 64, "no_such_arg": 1}
    report = _with_sim(GOOD, lambda url: preflight_endpoint(url, _cfg(expect)))
    checks = _by_name(report)
    assert checks["speculative_decoding"]["ok"]
    assert not checks["effective_max_running_requests"]["ok"]  # 48 with spec < 64 asked
    assert checks["effective_max_running_requests"]["actual"] == 48
    assert not checks["no_such_arg"]["ok"] and "does not report" in checks["no_such_arg"]["hint"]


def test_concurrency_beyond_the_server_cap_is_a_warning() -> None:
    cfg = _cfg({}, endpoints=[{"url": "http://placeholder", "concurrency": 64}])
    report = _with_sim(GOOD, lambda url: preflight_endpoint(url, cfg))
    check = _by_name(report)["concurrency"]
    assert check["ok"] and check["level"] == "warning" and check["actual"] == 48
    assert (
        "at most 48 requests at once" in check["hint"] and "lower endpoints.concurrency from 64 to 48" in check["hint"]
    )


def test_probe_carries_a_regen_probe_rid() -> None:
    async def body(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
        report = await preflight_endpoint(url, _cfg())
        async with httpx.AsyncClient(timeout=5) as http:
            stats = (await http.get(f"{url}/_sim/stats")).json()
        return report, stats

    report, stats = _with_sim(GOOD, body)
    assert report["info"]["probe_rid"].startswith(PROBE_RID_PREFIX)
    assert stats["requests"] == stats["probes"]["requests"] == 1
    assert stats["generations_total"] == 0


def test_the_simulator_is_told_after_it_has_served_prompts() -> None:
    """A rerun's preflight meets a simulator that has served many prompts: it still says so, from the brief stats
    (the whole body grows with every prompt served: ~25 MB after 100K)."""

    async def body(url: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=5) as http:
            for i in range(20):
                messages = [{"role": "user", "content": f"q{i}"}]
                request = {"model": MODEL, "messages": messages, "max_tokens": 8, "rid": f"r{i}"}
                await http.post(f"{url}/v1/chat/completions", json=request)
        return await preflight_endpoint(url, _cfg())

    report = _with_sim(GOOD, body)
    assert report["info"]["simulator"] is True


def test_transient_probe_failures_are_retried() -> None:
    key = prompt_key([{"role": "user", "content": PROBE_PROMPT}])
    plan = [FaultPlan(seed, p_500=0.5) for seed in range(200)]
    seed = next(i for i, f in enumerate(plan) if f.draw(key, 0) == "500" and f.draw(key, 1) is None)
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    argv = [*GOOD, "--fail-500", "0.5", "--seed", str(seed)]
    report = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg({}), sleep=sleep))
    assert _by_name(report)["thinking"]["ok"]
    assert report["info"]["probe_attempts"] == 2 and len(slept) == 1


def test_a_probe_refused_for_load_is_a_warning_not_drift() -> None:
    """A full server (503 "The request queue is full.", as SGLang's with --max-queued-requests, or another worker's
    run on it) is up: the probe is retried on the refusals' own budget (max_endpoint_failures, not max_attempts),
    and a server that keeps refusing is a warning, since nothing it said contradicts the config."""
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    cfg = _cfg({}, client={"backoff_base_s": 0.01, "max_attempts": 1, "max_endpoint_failures": 3})
    report = _with_sim([*GOOD, "--fail-503", "1.0"], lambda url: preflight_endpoint(url, cfg, sleep=sleep))
    check = _by_name(report)["probe"]
    assert check["ok"] and check["level"] == "warning" and "refused for load 3 times" in check["hint"]
    assert report["ok"] and report["info"]["probe_attempts"] == 3 and len(slept) == 2
    key = prompt_key([{"role": "user", "content": PROBE_PROMPT}])
    plan = [FaultPlan(seed, p_503=0.5) for seed in range(200)]
    seed = next(i for i, f in enumerate(plan) if f.draw(key, 0) == "503" and f.draw(key, 1) is None)
    report = _with_sim([*GOOD, "--fail-503", "0.5", "--seed", str(seed)], lambda url: preflight_endpoint(url, cfg))
    assert _by_name(report)["thinking"]["ok"] and report["info"]["probe_attempts"] == 2  # refused once, then served


def test_preflight_passes_against_a_server_answering_30_percent_empty() -> None:
    """An empty reply is the failure a repair run exists for, not a sign of a missing reasoning parser: the probe
    asks again, and only a reply with text judges the reasoning split. Eight preflights in a row (sixteen array
    workers' worth of probes would be the same) against a server whose first two probe replies are empty."""
    key = prompt_key([{"role": "user", "content": PROBE_PROMPT}])
    plan = [FaultPlan(seed, p_empty=0.3) for seed in range(500)]
    seed = next(i for i, f in enumerate(plan) if [f.draw(key, n) for n in range(3)] == ["empty", "empty", None])

    async def body(url: str) -> list[dict[str, Any]]:
        return [await preflight_endpoint(url, _cfg()) for _ in range(8)]

    reports = _with_sim([*GOOD, "--fail-empty", "0.3", "--seed", str(seed)], body)
    for report in reports:
        assert report["ok"], format_preflight({"ok": False, "endpoints": [report]})
        assert _by_name(report)["thinking"]["actual"].startswith("reasoning ")  # judged on a reply with text
    assert reports[0]["info"]["probe_attempts"] == 3


def test_a_server_answering_only_empty_is_a_warning_not_a_missing_parser() -> None:
    report = _with_sim([*GOOD, "--fail-empty", "1.0"], lambda url: preflight_endpoint(url, _cfg()))
    check = _by_name(report)["thinking"]
    assert report["ok"] and check["level"] == "warning" and check["actual"] == "empty completions"
    assert "--reasoning-parser" not in check["hint"] and "5 probe replies in a row" in check["hint"]
    assert "DRIFT" not in format_preflight({"ok": True, "endpoints": [report]})


def test_port_closed_is_reported_as_still_loading() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = asyncio.run(preflight_endpoint(f"http://127.0.0.1:{port}", _cfg()))
    assert not report["ok"] and not report["reachable"]
    (check,) = report["checks"]
    assert check["actual"] == "port closed" and "still loading" in check["hint"]


def test_an_endpoint_that_cannot_be_reached_is_down_not_drift() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    urls = [f"http://127.0.0.1:{port}", "http://regen-no-such-host.invalid:30000"]
    result = asyncio.run(preflight(_cfg(), urls=urls))
    text = format_preflight(result)
    assert not result["ok"] and "DRIFT" not in text and "differ from the config" not in text
    assert "DOWN" in text and text.endswith(f"2 of 2 endpoints cannot be reached ({', '.join(urls)})")


def test_refused_auth_is_not_a_closed_port() -> None:
    argv = [*GOOD, "--api-key", "sekret"]
    report = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg(), api_key="wrong"))
    assert report["reachable"] and not report["ok"]
    assert _by_name(report)["auth"]["actual"] == "refused (401)"
    good = _with_sim(argv, lambda url: preflight_endpoint(url, _cfg(), api_key="sekret"))
    assert good["ok"]


def test_model_name_mismatch() -> None:
    cfg = config_from_dict({"generation": {"model": "qwen3:27b"}})
    report = _with_sim(GOOD, lambda url: preflight_endpoint(url, cfg, probe=False))
    check = _by_name(report)["model"]
    assert not check["ok"] and check["actual"] == [MODEL] and "LoRA" in check["hint"]


def test_preflight_starts_sim_endpoints() -> None:
    cfg = _cfg(endpoints=[{"url": "sim", "sim_args": GOOD}])
    result = asyncio.run(preflight(cfg))
    assert result["ok"] and len(result["endpoints"]) == 1
    assert set(result["endpoints"][0]) >= {"url", "ok", "checks"}
    for check in result["endpoints"][0]["checks"]:
        assert set(check) >= {"name", "key", "expected", "actual", "ok", "hint"}


def test_sim_endpoint_that_sglang_would_refuse_is_reported() -> None:
    cfg = _cfg(endpoints=[{"url": "sim", "sim_args": ["--mamba-scheduler-strategy", "extra_buffer"]}])
    result = asyncio.run(preflight(cfg))
    (check,) = result["endpoints"][0]["checks"]
    assert not result["ok"] and "unrecognized arguments: --mamba-scheduler-strategy" in check["actual"]


def test_fingerprint_changes_when_the_server_restarts_differently() -> None:
    before = _with_sim(GOOD, server_fingerprint)
    same = _with_sim(GOOD, server_fingerprint)
    after = _with_sim([*GOOD, "--disable-radix-cache"], server_fingerprint)
    assert fingerprint_changes(before, same) == []
    assert "disable_radix_cache: False → True" in fingerprint_changes(before, after)
    assert before["mamba_radix_cache_strategy"] == "extra_buffer"


@pytest.mark.parametrize(
    ("name", "info", "version", "key"),
    [
        ("mamba_scheduler_strategy", {"mamba_radix_cache_strategy": "x"}, "0.5.23", "mamba_radix_cache_strategy"),
        ("mamba-scheduler-strategy", {"mamba_scheduler_strategy": "x"}, None, "mamba_scheduler_strategy"),
        ("mamba_radix_cache_strategy", {"mamba_scheduler_strategy": "x"}, "0.5.12", "mamba_scheduler_strategy"),
        ("mamba_radix_cache_strategy", {}, "0.5.9", "mamba_scheduler_strategy"),
        ("tp", {}, None, "tp_size"),
        ("model-path", {}, None, "model_path"),
    ],
    ids=["old-name-new-server", "dashes-unknown-version", "new-name-old-server", "absent", "tp-alias", "dashes"],
)
def test_resolve_key(name: str, info: dict[str, Any], version: str | None, key: str) -> None:
    assert server_args.resolve_key(name, info, version) == key


@pytest.mark.parametrize(
    ("key", "expected", "actual", "same"),
    [
        ("disable_radix_cache", False, False, True),
        ("disable_radix_cache", "false", False, True),
        ("disable_radix_cache", False, True, False),
        ("mem_fraction_static", 1, 1.0, True),
        ("speculative_algorithm", "NEXTN", "EAGLE", True),
        ("speculative_algorithm", "EAGLE", None, False),
        ("cuda_graph_bs", [1, 2], [1, 2], True),
        ("effective_max_running_requests", 32, 48, True),
        ("effective_max_running_requests", 64, 48, False),
    ],
)
def test_same_value(key: str, expected: Any, actual: Any, same: bool) -> None:
    assert server_args.same_value(key, expected, actual) is same


MOTIVATING_SIM = [*GOOD, "--max-mamba-cache-size", "24", "--mem-fraction-static", "0.92", "--trust-remote-code"]


@pytest.mark.parametrize(
    ("version", "strategy_flag", "cap", "words"),
    [
        ("0.5.23", "--mamba-radix-cache-strategy", 4, "speculative decoding and the overlap scheduler on"),
        ("0.5.14", "--mamba-radix-cache-strategy", 4, "5 slots per request"),
        ("0.5.9", "--mamba-scheduler-strategy", 6, "4 slots per request with extra_buffer and speculative decoding"),
    ],
    ids=["0.5.23", "0.5.14", "0.5.9"],
)
def test_concurrency_warning_names_the_mamba_cache_flag(version: str, strategy_flag: str, cap: int, words: str) -> None:
    argv = [strategy_flag if a == "--mamba-radix-cache-strategy" else a for a in MOTIVATING_SIM]
    cfg = _cfg({}, endpoints=[{"url": "http://placeholder", "concurrency": 64}])
    report = _with_sim([*argv, "--sim-version", version], lambda url: preflight_endpoint(url, cfg))
    check = _by_name(report)["concurrency"]
    assert report["ok"] and check["level"] == "warning" and check["actual"] == cap
    assert f"--max-mamba-cache-size 24 caps this server at {cap} running requests" in check["hint"]
    assert words in check["hint"] and f"lower endpoints.concurrency from 64 to {cap}" in check["hint"]
    assert report["info"]["effective_max_running_requests"] == cap


def test_capacity_is_computed_from_the_args_when_the_server_does_not_report_it() -> None:
    info = {
        "version": "0.5.19",
        "model_path": "Qwen/Qwen3.6-27B",
        "speculative_algorithm": "EAGLE",
        "max_running_requests": 48,
        "mamba_radix_cache_strategy": "extra_buffer",
        "disable_overlap_schedule": False,
        "max_mamba_cache_size": 24,
    }
    assert server_args.effective_concurrency(info) == 4
    cause = server_args.capacity_of(info)
    assert cause.flag == "--max-mamba-cache-size" and cause.requests == 4
    assert server_args.effective_concurrency({**info, "disable_overlap_schedule": True}) == 6
    assert server_args.effective_concurrency({**info, "disable_radix_cache": True}) == 24
    assert server_args.effective_concurrency({**info, "model_path": "Qwen/Qwen3-8B"}) == 48


_JSON_CONFIG = """
[generation]
model = "Qwen3.6-27B"
[client]
backoff_base_s = 0.01
[[endpoints]]
url = "sim"
concurrency = 5000
sim_args = ["--served-model-name", "Qwen3.6-27B", "--max-running-requests", "8"]
[[endpoints]]
url = "sim"
sim_args = ["--mamba-scheduler-strategy", "extra_buffer"]
[[endpoints]]
url = "http://127.0.0.1:CLOSED"
[expect]
speculative_algorithm = "EAGLE"
mamba_scheduler_strategy = "extra_buffer"
reasoning_parser = "qwen3"
nonexistent_key_xyz = 3
"""

_CHECK_KEYS = ["name", "key", "expected", "actual", "ok", "hint", "level"]
# What `regen preflight --json` printed for _JSON_CONFIG before checks became records (issue 26 item 3): each
# check's values in the order of _CHECK_KEYS.
_JSON_CHECKS = [
    [
        ["reachable", None, "open", "open", True, "", "info"],
        ["server", None, None, "simulator 0.5.23", True, "", "info"],
        ["health", None, 200, 200, True, "", "info"],
        ["model", "served_model_name", MODEL, [MODEL], True, "", "info"],
        ["context length", "context_length", "> 32768", 262144, True, "", "info"],
        ["speculative_algorithm", "speculative_algorithm", "EAGLE", None, False,
         "speculative decoding is off: launch with --speculative-algorithm (EAGLE for MTP heads)", "error"],
        ["mamba_scheduler_strategy", "mamba_radix_cache_strategy", "extra_buffer", "extra_buffer", True, "", "info"],
        ["reasoning_parser", "reasoning_parser", "qwen3", None, False,
         "without --reasoning-parser the reasoning lands in content with its </think>; launch with it", "error"],
        ["nonexistent_key_xyz", "nonexistent_key_xyz", 3, None, False,
         "SGLang 0.5.23 does not report nonexistent_key_xyz", "error"],
        ["concurrency", "effective_max_running_requests", "≥ 5000", 8, True,
         "the server runs at most 8 requests at once: --max-running-requests 8 caps this server at 8 running "
         "requests; raise --max-running-requests or lower endpoints.concurrency from 5000 to 8", "warning"],
        ["thinking", "reasoning_content", "separated", "reasoning inside content", False,
         "no --reasoning-parser (or separate_reasoning off): the client splits at </think> itself, but launch with "
         "--reasoning-parser qwen3", "error"],
        ["speculative", "speculative_algorithm", None, "off", True,
         "launch with --speculative-algorithm to decode faster", "info"],
    ],
    [
        ["start", None, "the simulator starts",
         "argparse: unrecognized arguments: --mamba-scheduler-strategy extra_buffer", False, "fix endpoints.sim_args",
         "error"],
    ],
    [
        ["reachable", None, "open", "port closed", False,
         "still loading weights or not started: SGLang binds its port only after loading", "error"],
    ],
]  # fmt: skip


def test_preflight_json_keeps_its_keys_their_order_and_values(tmp_path, capsys) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = str(sock.getsockname()[1])
    config = tmp_path / "c.toml"
    config.write_text(_JSON_CONFIG.replace("CLOSED", closed))
    assert main(["preflight", str(config), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)  # dicts keep the order of the text
    assert list(out) == ["ok", "endpoints"] and out["ok"] is False
    endpoints = out["endpoints"]
    assert [list(ep) for ep in endpoints] == [["url", "ok", "reachable", "version", "checks", "info"]] * 3
    assert [(ep["ok"], ep["reachable"], ep["version"]) for ep in endpoints] == [
        (False, True, "0.5.23"),
        (False, False, None),
        (False, False, None),
    ]
    assert [[list(c) for c in ep["checks"]] for ep in endpoints] == [[_CHECK_KEYS] * len(c) for c in _JSON_CHECKS]
    assert [[list(c.values()) for c in ep["checks"]] for ep in endpoints] == _JSON_CHECKS
    assert endpoints[1]["info"] == {} and list(endpoints[0]["info"]) == list(endpoints[2]["info"])


def test_a_workers_check_in_json_names_the_worker_last() -> None:
    refused = Check("reachable", None, expected="open", actual="port closed", ok=False, hint="h")
    worker = EndpointReport("http://w:1", False, (refused,), {})
    (tagged,) = worker_checks([worker], [("reasoning_parser", "qwen3", "expect")])
    assert list(tagged.as_json().items()) == [
        ("name", "reachable"),
        ("key", None),
        ("expected", "open"),
        ("actual", "port closed"),
        ("ok", False),
        ("hint", "the router lists it but it cannot be reached from here: not checked: reasoning_parser"),
        ("level", "error"),
        ("worker", "http://w:1"),
    ]


def test_max_tokens_that_leaves_no_room_in_the_context_fails_preflight() -> None:
    async def main() -> None:
        async with serve(SimConfig(served_model_name=MODEL, context_length=4096)) as url:
            cfg = config_from_dict({"generation": {"model": MODEL, "max_tokens": 4096}, "endpoints": [{"url": url}]})
            result = await preflight(cfg)
            [check] = [c for c in result["endpoints"][0]["checks"] if c["name"] == "context length"]
            assert (check["ok"], check["actual"]) == (False, 4096) and not result["ok"]
            assert "generation.max_tokens (4096) leaves no room" in check["hint"] and "e.g. 2048" in check["hint"]
            fits = config_from_dict({"generation": {"model": MODEL, "max_tokens": 2048}, "endpoints": [{"url": url}]})
            assert (await preflight(fits))["ok"]

    asyncio.run(main())
